"""``sft_dataset``: a curated Hugging Face SFT dataset from a teacher's consolidated examples."""

import json

import dagster as dg

from assets.failures import one_line_failures
from assets.lineage import ASSET_CODE_VERSION, id_metadata, materialized_value
from assets.settings_config import with_config_fields
from evoharness.consolidation.audit import quality_gate
from evoharness.consolidation.config import QualityThresholds
from evoharness.curation.build import curate
from evoharness.curation.config import CurationConfig
from evoharness.reporting.charts import bar_chart_png, markdown_image, markdown_table
from pipelines.partitions import teacher_partitions
from pipelines.resources import WarehouseResource


@with_config_fields(CurationConfig, exclude={"teacher"})
class CurationRunConfig(dg.Config):
    """Run config of a curation: the fields of CurationConfig, with its defaults (the partition is the teacher)."""


@dg.asset(
    partitions_def=teacher_partitions,
    deps=["bpe_examples"],
    group_name="curation",
    code_version=ASSET_CODE_VERSION,
    kinds={"python", "duckdb", "polars"},
    description="Success-filtered, quality-gated, deduplicated, task-balanced SFT dataset (train games only).",
)
@one_line_failures
def sft_dataset(context: dg.AssetExecutionContext, config: CurationRunConfig,
                warehouse: WarehouseResource) -> dg.MaterializeResult:
    teacher = context.partition_key
    curation = CurationConfig(teacher=teacher, **config.model_dump())
    with warehouse.open() as wh:
        gate = quality_gate(wh, teacher, curation.consolidator, QualityThresholds())
        if not gate.passed:
            raise dg.Failure(f"quality gate failed for {teacher}/{curation.consolidator}: {'; '.join(gate.failures)}")
        result = curate(wh, curation, context.run.run_id)
        row = wh.one("dataset_lineage", dataset_id=result.dataset_id)
    by_type = result.composition.get("task_type", {})
    chart = bar_chart_png(list(by_type), [float(v) for v in by_type.values()],
                          f"{result.dataset_id}: examples by task type", "examples") if by_type else None
    lineage = {"consolidation_runs": json.loads(row[0]), "source_episodes": row[1], "code_version": row[2],
               "curation_run_id": row[3]} if row else {}
    metadata: dict[str, dg.MetadataValue] = id_metadata(lineage) | {
        "dataset_id": dg.MetadataValue.text(result.dataset_id),
        "path": dg.MetadataValue.path(result.path),
        "train_examples": dg.MetadataValue.int(result.n_train),
        "validation_examples": dg.MetadataValue.int(result.n_validation),
        "bank_version": dg.MetadataValue.int(result.bank_version),
        "reused_identical_version": dg.MetadataValue.bool(result.reused),
        "composition": dg.MetadataValue.md(markdown_table(
            ["group", "key", "examples"],
            [(g, k, v) for g, counts in result.composition.items() for k, v in counts.items()])),
        "dropped": dg.MetadataValue.md(markdown_table(["reason", "count"], list(result.dropped.items()))),
    }
    if chart is not None:
        metadata["examples_by_task_type"] = dg.MetadataValue.md(markdown_image(chart, "examples by task type"))
    return dg.MaterializeResult(metadata=metadata)


@dg.asset_check(asset=sft_dataset, blocking=True,
                description="No game of valid_seen or valid_unseen is in the dataset (read back from disk and "
                            "from dataset_games, both checked against the games table).")
@one_line_failures
def sft_dataset_no_eval_games(context: dg.AssetCheckExecutionContext,
                              warehouse: WarehouseResource) -> dg.AssetCheckResult:
    import datasets

    dataset_id = _materialized_dataset(context)  # the dataset the checked materialization produced
    if dataset_id is None:
        return dg.AssetCheckResult(passed=False, metadata={"reason": dg.MetadataValue.text("no dataset")})
    with warehouse.open() as wh:
        path = wh.value("dataset_path", dataset_id=dataset_id)
        loaded = datasets.load_from_disk(path)
        on_disk = sorted({g for part in loaded.values() for g in part["game_id"]})
        splits = dict(wh.query("game_splits", game_ids=on_disk)[1])
        leaks_sql = wh.value("curation_leak_count", dataset_id=dataset_id)
    leaks = [g for g in on_disk if splits.get(g) != "train"]
    return dg.AssetCheckResult(
        passed=not leaks and leaks_sql == 0,
        metadata={"dataset_id": dg.MetadataValue.text(dataset_id), "games": dg.MetadataValue.int(len(on_disk)),
                  "non_train_games_on_disk": dg.MetadataValue.int(len(leaks)),
                  "curation_leaks_rows": dg.MetadataValue.int(int(leaks_sql))},
    )


def _materialized_dataset(context: dg.AssetCheckExecutionContext) -> str | None:
    """The ``dataset_id`` in the metadata of this partition's latest ``sft_dataset`` materialization."""
    value = materialized_value(context.instance, "sft_dataset", "dataset_id",
                               context.partition_key if context.has_partition_key else None)
    return None if value is None else str(value)
