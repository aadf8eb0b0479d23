"""``student_evaluation``: a model version played on the evaluation splits, next to its teacher."""

import dagster as dg
from pydantic import Field

from assets.failures import one_line_failures
from assets.lineage import ASSET_CODE_VERSION, collection_lineage, id_metadata
from assets.settings_config import with_config_fields
from assets.training import grpo_curves
from evoharness.evaluation.compare import PairedOutcome, paired_outcomes
from evoharness.evaluation.losses import LOSS_COLUMNS, loss_table, lost_games
from evoharness.evaluation.run import EvaluationConfig, evaluate
from evoharness.reporting.charts import bar_chart_png, markdown_image, markdown_table
from evoharness.stage_config import defaults, description
from evoharness.training.model_versions import stored_version
from pipelines.partitions import model_version_partitions
from pipelines.resources import AlfworldResource, WarehouseResource

DEFAULTS = defaults(EvaluationConfig)  # the one declaration of the defaults: evaluation.run


@with_config_fields(EvaluationConfig, exclude={"model_version", "workers", "data_root", "checkpoint"})
class EvaluationRunConfig(dg.Config):
    """Run config of an evaluation: the fields of EvaluationConfig, with its defaults (both held-out splits,
    greedy decoding). The partition names the version (its final weights: a checkpoint plays from the CLI only) and
    the alfworld resource the data."""

    splits: list[str] = Field(default=DEFAULTS["splits"], description=description(EvaluationConfig, "splits"))


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
    evaluation = EvaluationConfig(model_version=context.partition_key, data_root=alfworld.root(),
                                  **config.model_dump())

    def on_progress(split: str, done: int, total: int, record) -> None:  # type: ignore[no-untyped-def]
        context.log.info("%s episode %d/%d %s %s (%d steps)", split, done, total, record.spec.game.game_id,
                         "won" if record.won else record.status, len(record.steps))

    with warehouse.open() as wh:
        result = evaluate(wh, evaluation, context.run.run_id, on_progress=on_progress)
        trained = wh.one("model_version_lineage", model_version=context.partition_key)
        version = stored_version(wh, context.partition_key)
        parent = trained[3] if trained else None
        against_parent = paired_outcomes(wh, result.policy, evaluation.model_copy(update={"model_version": parent})
                                         .policy, evaluation.max_steps) if parent else []
        students = wh.query("teacher_students_for", teacher=trained[0]) if trained else None
        losses = {split: loss_table(lost_games(wh, result.policy, split, evaluation.max_steps))
                  for split in evaluation.splits}
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
    for split in evaluation.splits:
        rate = result.success_rate(split)
        if rate is not None:
            metadata[f"success_rate_{split}"] = dg.MetadataValue.float(rate)
    if against_parent:  # the same decoding of the parent, game by game: does the child win games the parent lost?
        metadata["against_parent"] = dg.MetadataValue.md(markdown_table(
            list(PairedOutcome.COLUMNS), [o.row() for o in against_parent]))
        for outcome in against_parent:
            metadata[f"gain_over_parent_{outcome.split}"] = dg.MetadataValue.float(outcome.success_gain)
            metadata[f"p_against_parent_{outcome.split}"] = dg.MetadataValue.float(outcome.p_value)
    if students and students[1]:  # the teacher's students side by side, and the one to use (best on dev)
        columns, rows = students
        metadata["students_of_teacher"] = dg.MetadataValue.md(markdown_table(columns, rows))
        to_use = [r[columns.index("model_version")] for r in rows if r[columns.index("dev_rank")] == 1
                  and r[columns.index("max_steps")] == evaluation.max_steps]
        if to_use:
            metadata["student_to_use"] = dg.MetadataValue.text(to_use[0])
    for split, rows in losses.items():  # where the lost games stopped (evoharness.evaluation.losses)
        if rows:
            metadata[f"losses_{split}"] = dg.MetadataValue.md(markdown_table(list(LOSS_COLUMNS), rows))
    if student_rows:
        chart = bar_chart_png([f"{r[index['split']]}/{r[index['task_type']]}" for r in student_rows],
                              [float(r[index["success_rate"]]) for r in student_rows],
                              f"{context.partition_key}: success by split and task type", "success rate", (0, 1.05))
        metadata["success_by_task_type"] = dg.MetadataValue.md(markdown_image(chart, "success by task type"))
    return dg.MaterializeResult(metadata=metadata)
