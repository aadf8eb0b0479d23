"""``student_evaluation``: a model version played on the evaluation splits, next to its teacher."""



import dagster as dg
from pydantic import Field

from assets.failures import one_line_failures
from assets.lineage import ASSET_CODE_VERSION, collection_lineage, id_metadata
from assets.training import grpo_curves
from evoharness.evaluation.compare import PairedOutcome, paired_outcomes
from evoharness.evaluation.run import EvaluationConfig, evaluate
from evoharness.harness.prompts import Mode
from evoharness.reporting.charts import bar_chart_png, markdown_image, markdown_table
from evoharness.stage_config import defaults
from evoharness.teachers.clients.structured import StructuredOutputs
from evoharness.training.model_versions import stored_version
from pipelines.partitions import model_version_partitions
from pipelines.resources import AlfworldResource, WarehouseResource

DEFAULTS = defaults(EvaluationConfig)  # the one declaration of the defaults: evaluation.run


class EvaluationRunConfig(dg.Config):
    """Run config of an evaluation (defaults: EvaluationConfig — both full evaluation splits, greedy decoding)."""

    splits: list[str] = Field(default=DEFAULTS["splits"], description="Evaluation splits.")
    limit: int | None = Field(default=DEFAULTS["limit"], description="First N games per split (None: the full "
                              "split).")
    mode: str | None = Field(default=DEFAULTS["mode"], description="bpe or react (None: the mode the student "
                             "trained in).")
    max_steps: int = Field(default=DEFAULTS["max_steps"], description="Step budget per episode.")
    max_tokens: int = Field(default=DEFAULTS["max_tokens"], description="Completion tokens per turn.")
    temperature: float | None = Field(default=DEFAULTS["temperature"], description="None: greedy.")
    concurrency: int = Field(default=DEFAULTS["concurrency"], description="Episodes in flight (their turns "
                             "generate as one batch).")
    constrain_actions: bool = Field(default=DEFAULTS["constrain_actions"], description="Decode actions "
                                    "constrained to the admissible commands and meta-actions.")
    avoid_repeats: bool = Field(default=DEFAULTS["avoid_repeats"], description="Also leave out environment "
                                "commands already issued in the same state (policy '<version>.no-repeat').")
    engine: str | None = Field(default=DEFAULTS["engine"], description="textworld or fast (None: library "
                               "default).")
    processes: int | None = Field(default=DEFAULTS["processes"], description="Processes that share each split's "
                                  "games (a local student: one core each); None: one per core, as many as fit in "
                                  "half the memory.")
    serve_url: str | None = Field(default=DEFAULTS["serve_url"], description="OpenAI-compatible server serving "
                                  "the version (e.g. http://host:8000/v1); None: play in this process.")
    served_model: str | None = Field(default=DEFAULTS["served_model"], description="Model name on that server "
                                     "(None: the version id).")
    structured_outputs: StructuredOutputs | None = Field(
        default=DEFAULTS["structured_outputs"], description="With serve_url: the server's structured-output option "
        "that takes the action constraint (vllm, vllm-guided, sglang); None: unconstrained.")


@dg.asset(
    partitions_def=model_version_partitions,
    deps=[dg.AssetDep(key, partition_mapping=dg.AllPartitionMapping()) for key in ("sft_student", "grpo_student")],
    group_name="evaluation",
    code_version=ASSET_CODE_VERSION,
    kinds={"pytorch", "duckdb"},
    description="Success per split and task type, steps, harness calls, invalid turns and tokens of one model "
                "version, beside the teacher it was distilled from (policy_evaluation view).",
)
@one_line_failures
def student_evaluation(context: dg.AssetExecutionContext, config: EvaluationRunConfig, alfworld: AlfworldResource,
                       warehouse: WarehouseResource) -> dg.MaterializeResult:
    evaluation = EvaluationConfig(
        model_version=context.partition_key, splits=tuple(config.splits), limit=config.limit,
        mode=Mode(config.mode) if config.mode else None, constrain_actions=config.constrain_actions,
        avoid_repeats=config.avoid_repeats,
        max_steps=config.max_steps, max_tokens=config.max_tokens, temperature=config.temperature,
        concurrency=config.concurrency, engine=config.engine, processes=config.processes, data_root=alfworld.root(),
        serve_url=config.serve_url, served_model=config.served_model,
        structured_outputs=config.structured_outputs,
    )

    def on_progress(split: str, done: int, total: int, record) -> None:  # type: ignore[no-untyped-def]
        context.log.info("%s episode %d/%d %s %s (%d steps)", split, done, total, record.spec.game.game_id,
                         "won" if record.won else record.status, len(record.steps))

    with warehouse.open() as wh:
        result = evaluate(wh, evaluation, context.run.run_id, on_progress=on_progress)
        trained = wh.one("model_version_lineage", model_version=context.partition_key)
        version = stored_version(wh, context.partition_key)
        parent = trained[3] if trained else None
        against_parent = paired_outcomes(wh, result.policy, evaluation.model_copy(update={"model_version": parent})
                                         .policy, config.max_steps) if parent else []
    index = {c: i for i, c in enumerate(result.columns)}
    student_rows = [r for r in result.rows  # a type whose episodes all failed has no rate: not drawn as 0
                    if r[index["policy"]] == result.policy and r[index["task_type"]] != "ALL"
                    and r[index["success_rate"]] is not None]
    played = next(iter(result.by_split.values()), None)
    metadata: dict[str, dg.MetadataValue] = (collection_lineage(played, context.run.run_id) if played else {}) | \
        id_metadata(dict(zip(("distilled_from", "stage", "dataset_id", "parent_version"), trained or ()))) | {
        "evaluation": dg.MetadataValue.md(markdown_table(result.columns, result.rows)),
        "episodes_written": dg.MetadataValue.int(sum(r.written for r in result.by_split.values())),
    } | (grpo_curves(version) if version else {})  # a GRPO version's training curves beside how it plays
    for split in config.splits:
        rate = result.success_rate(split)
        if rate is not None:
            metadata[f"success_rate_{split}"] = dg.MetadataValue.float(rate)
    if against_parent:  # the same decoding of the parent, game by game: does the child win games the parent lost?
        metadata["against_parent"] = dg.MetadataValue.md(markdown_table(
            list(PairedOutcome.COLUMNS), [o.row() for o in against_parent]))
        for outcome in against_parent:
            metadata[f"gain_over_parent_{outcome.split}"] = dg.MetadataValue.float(outcome.success_gain)
            metadata[f"p_against_parent_{outcome.split}"] = dg.MetadataValue.float(outcome.p_value)
    if student_rows:
        chart = bar_chart_png([f"{r[index['split']]}/{r[index['task_type']]}" for r in student_rows],
                              [float(r[index["success_rate"]]) for r in student_rows],
                              f"{context.partition_key}: success by split and task type", "success rate", (0, 1.05))
        metadata["success_by_task_type"] = dg.MetadataValue.md(markdown_image(chart, "success by task type"))
    return dg.MaterializeResult(metadata=metadata)
