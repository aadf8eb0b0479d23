"""``student_evaluation``: a model version played on the evaluation splits, next to its teacher."""



import dagster as dg
from pydantic import Field

from evoharness.evaluation.run import EVAL_SPLITS, EvaluationConfig, evaluate
from evoharness.harness.prompts import Mode
from evoharness.reporting.charts import bar_chart_png, markdown_image, markdown_table
from pipelines.partitions import model_version_partitions
from pipelines.resources import AlfworldResource, WarehouseResource


class EvaluationRunConfig(dg.Config):
    """Run config of an evaluation (defaults: both full evaluation splits, greedy decoding, 70 steps)."""

    splits: list[str] = Field(default=list(EVAL_SPLITS), description="Evaluation splits.")
    limit: int | None = Field(default=None, description="First N games per split (None: the full split).")
    mode: str | None = Field(default=None, description="bpe or react (None: the mode the student trained in).")
    max_steps: int = Field(default=70, description="Step budget per episode.")
    max_tokens: int = Field(default=128, description="Completion tokens per turn.")
    temperature: float | None = Field(default=None, description="None: greedy.")
    concurrency: int = Field(default=16, description="Episodes in flight (their turns generate as one batch).")
    constrain_actions: bool = Field(default=True, description="Decode actions constrained to the admissible "
                                    "commands and meta-actions.")
    engine: str | None = Field(default=None, description="textworld or fast (None: library default).")
    serve_url: str | None = Field(default=None, description="OpenAI-compatible server serving the version "
                                  "(e.g. http://host:8000/v1); None: play in this process.")
    served_model: str | None = Field(default=None, description="Model name on that server (None: the version id).")


@dg.asset(
    partitions_def=model_version_partitions,
    deps=[dg.AssetDep(key, partition_mapping=dg.AllPartitionMapping()) for key in ("sft_student", "grpo_student")],
    group_name="evaluation",
    description="Success per split and task type, steps, harness calls, invalid turns and tokens of one model "
                "version, beside the teacher it was distilled from (policy_evaluation view).",
)
def student_evaluation(context: dg.AssetExecutionContext, config: EvaluationRunConfig, alfworld: AlfworldResource,
                       warehouse: WarehouseResource) -> dg.MaterializeResult:
    evaluation = EvaluationConfig(
        model_version=context.partition_key, splits=tuple(config.splits), limit=config.limit,
        mode=Mode(config.mode) if config.mode else None, constrain_actions=config.constrain_actions,
        max_steps=config.max_steps, max_tokens=config.max_tokens, temperature=config.temperature,
        concurrency=config.concurrency, engine=config.engine, data_root=alfworld.root(),
        serve_url=config.serve_url, served_model=config.served_model,
    )

    def on_progress(split: str, done: int, total: int, record) -> None:  # type: ignore[no-untyped-def]
        context.log.info("%s episode %d/%d %s %s (%d steps)", split, done, total, record.spec.game.game_id,
                         "won" if record.won else record.status, len(record.steps))

    with warehouse.open() as wh:
        result = evaluate(wh, evaluation, context.run.run_id, on_progress=on_progress)
    index = {c: i for i, c in enumerate(result.columns)}
    student_rows = [r for r in result.rows
                    if r[index["policy"]] == result.model_version and r[index["task_type"]] != "ALL"]
    metadata: dict[str, dg.MetadataValue] = {
        "evaluation": dg.MetadataValue.md(markdown_table(result.columns, result.rows)),
        "episodes_written": dg.MetadataValue.int(sum(r.written for r in result.by_split.values())),
    }
    for split in config.splits:
        rate = result.success_rate(split)
        if rate is not None:
            metadata[f"success_rate_{split}"] = dg.MetadataValue.float(rate)
    if student_rows:
        chart = bar_chart_png([f"{r[index['split']]}/{r[index['task_type']]}" for r in student_rows],
                              [float(r[index["success_rate"]]) for r in student_rows],
                              f"{context.partition_key}: success by split and task type", "success rate", (0, 1.05))
        metadata["success_by_task_type"] = dg.MetadataValue.md(markdown_image(chart, "success by task type"))
    return dg.MaterializeResult(metadata=metadata)
