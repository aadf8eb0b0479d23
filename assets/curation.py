"""``sft_dataset``: a curated Hugging Face SFT dataset from a teacher's consolidated examples."""



import dagster as dg
from pydantic import Field

from evoharness.consolidation.audit import quality_gate
from evoharness.consolidation.config import QualityThresholds
from evoharness.curation.build import curate, newest_dataset
from evoharness.curation.config import CurationConfig
from evoharness.reporting.charts import bar_chart_png, markdown_image, markdown_table
from pipelines.partitions import teacher_partitions
from pipelines.resources import WarehouseResource


class CurationRunConfig(dg.Config):
    """Run config of a curation."""

    name: str = Field(default="sft", description="Dataset name.")
    consolidator: str = Field(default="rule", description="Whose examples: rule or llm.")
    max_tokens: int = Field(default=4096, description="Token limit per example.")
    tokenizer: str | None = Field(default=None, description="HF tokenizer path (None: bytes/4 estimate).")
    validation_fraction: float = Field(default=0.1, description="Share of games held out, by game.")
    balance_factor: float = Field(default=1.5, description="Cap per task type: factor × rarest type count.")
    output_dir: str | None = Field(default=None, description="None: <warehouse folder>/datasets.")


@dg.asset(
    partitions_def=teacher_partitions,
    deps=["bpe_examples"],
    group_name="curation",
    description="Success-filtered, quality-gated, deduplicated, task-balanced SFT dataset (train games only).",
)
def sft_dataset(context: dg.AssetExecutionContext, config: CurationRunConfig,
                warehouse: WarehouseResource) -> dg.MaterializeResult:
    teacher = context.partition_key
    curation = CurationConfig(
        name=f"{config.name}-{teacher}", teacher=teacher, consolidator=config.consolidator,
        max_tokens=config.max_tokens, tokenizer=config.tokenizer, validation_fraction=config.validation_fraction,
        balance_factor=config.balance_factor, output_dir=config.output_dir,
    )
    with warehouse.open() as wh:
        gate = quality_gate(wh, teacher, config.consolidator, QualityThresholds())
        if not gate.passed:
            raise dg.Failure(f"quality gate failed for {teacher}/{config.consolidator}: {'; '.join(gate.failures)}")
        result = curate(wh, curation, context.run.run_id)
    by_type = result.composition.get("task_type", {})
    chart = bar_chart_png(list(by_type), [float(v) for v in by_type.values()],
                          f"{result.dataset_id}: examples by task type", "examples") if by_type else None
    metadata: dict[str, dg.MetadataValue] = {
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
def sft_dataset_no_eval_games(context: dg.AssetCheckExecutionContext,
                              warehouse: WarehouseResource) -> dg.AssetCheckResult:
    import datasets

    teacher = context.partition_key if context.has_partition_key else "expert"
    with warehouse.open() as wh:
        try:
            dataset_id, path = newest_dataset(wh, teacher)
        except LookupError:
            return dg.AssetCheckResult(passed=False, metadata={"reason": dg.MetadataValue.text("no dataset")})
        loaded = datasets.load_from_disk(path)
        on_disk = sorted({g for part in loaded.values() for g in part["game_id"]})
        splits = dict(wh.con.execute("SELECT game_id, split FROM games WHERE list_contains(?, game_id)",
                                     [on_disk]).fetchall())
        leaks_sql = wh.scalar("SELECT count(*) FROM curation_leaks WHERE dataset_id = ?", [dataset_id])
    leaks = [g for g in on_disk if splits.get(g) != "train"]
    return dg.AssetCheckResult(
        passed=not leaks and leaks_sql == 0,
        metadata={"dataset_id": dg.MetadataValue.text(dataset_id), "games": dg.MetadataValue.int(len(on_disk)),
                  "non_train_games_on_disk": dg.MetadataValue.int(len(leaks)),
                  "curation_leaks_rows": dg.MetadataValue.int(int(leaks_sql))},
    )
