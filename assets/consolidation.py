"""``bpe_examples``: a teacher's stored episodes consolidated into BPE-annotated per-turn examples.

Asynchronous by design: its own asset (collection never waits on it), bounded concurrency inside, the
warehouse opened only around short reads and writes. The blocking check gates everything downstream.
"""




import dagster as dg
from pydantic import Field

from assets.failures import one_line_failures
from assets.lineage import ASSET_CODE_VERSION, id_metadata, materialized_value
from evoharness.consolidation.audit import quality_gate
from evoharness.consolidation.config import ConsolidationConfig, LLMSettings, QualityThresholds
from evoharness.consolidation.pipeline import consolidate
from evoharness.reporting.charts import bar_chart_png, markdown_image, markdown_table
from evoharness.stage_config import defaults
from pipelines.partitions import teacher_partitions
from pipelines.resources import AlfworldResource, WarehouseResource
from warehouse import Warehouse

DEFAULTS = defaults(ConsolidationConfig)  # the one declaration of the defaults: consolidation.config
LLM_DEFAULTS = defaults(LLMSettings)


class ConsolidationRunConfig(dg.Config):
    """Run config of a consolidation (defaults: ConsolidationConfig and its LLMSettings)."""

    consolidator: str = Field(default=DEFAULTS["consolidator"], description="rule (offline default) or llm.")
    splits: list[str] = Field(default=DEFAULTS["splits"], description="Source splits.")
    limit: int | None = Field(default=DEFAULTS["limit"], description="At most N source episodes.")
    engine: str | None = Field(default=DEFAULTS["engine"], description="Replay engine (None: library default).")
    workers: int | None = Field(default=DEFAULTS["workers"], description="Replay worker processes (None: by "
                                "engine).")
    concurrency: int = Field(default=DEFAULTS["concurrency"], description="Episodes in flight.")
    batch_size: int = Field(default=DEFAULTS["batch_size"], description="Episodes per bank batch.")
    reconsolidate: bool = Field(default=DEFAULTS["reconsolidate"], description="Redo episodes already "
                                "consolidated.")
    llm_teacher: str = Field(default=LLM_DEFAULTS["teacher"], description="LLM consolidator: registered teacher "
                             "name.")
    llm_max_attempts: int = Field(default=LLM_DEFAULTS["max_attempts"], description="LLM calls per episode before "
                                  "it fails.")


def _consolidator(config: ConsolidationRunConfig, settings: LLMSettings):  # type: ignore[no-untyped-def]
    from evoharness.consolidation.llm import build_llm_consolidator
    from evoharness.consolidation.rules import RuleConsolidator

    if config.consolidator == "rule":
        return RuleConsolidator()
    if config.consolidator == "llm":
        return build_llm_consolidator(settings)
    raise dg.Failure(f"Unknown consolidator {config.consolidator!r}; expected rule or llm.")


@dg.asset(
    partitions_def=teacher_partitions,
    deps=["teacher_episodes"],
    group_name="consolidation",
    code_version=ASSET_CODE_VERSION,
    kinds={"python", "duckdb"},
    description="Per-turn BPE training examples with Belief/Progress/Experience JSON, audit rows and bank versions.",
)
@one_line_failures
def bpe_examples(
    context: dg.AssetExecutionContext, config: ConsolidationRunConfig, alfworld: AlfworldResource,
    warehouse: WarehouseResource,
) -> dg.MaterializeResult:
    teacher = context.partition_key
    settings = LLMSettings(teacher=config.llm_teacher, max_attempts=config.llm_max_attempts)
    run_config = ConsolidationConfig(
        teacher=teacher, consolidator=config.consolidator, splits=tuple(config.splits), limit=config.limit,  # type: ignore[arg-type]
        engine=config.engine, workers=config.workers, concurrency=config.concurrency,
        batch_size=config.batch_size, reconsolidate=config.reconsolidate, llm=settings, data_root=alfworld.root(),
    )

    def on_progress(done: int, total: int, outcome) -> None:  # type: ignore[no-untyped-def]
        context.log.info("episode %d/%d %s %s", done, total, outcome.episode.game_id, outcome.failure or "ok")

    db_path = warehouse.db_path()
    result = consolidate(run_config, db_path, _consolidator(config, settings), context.run.run_id, on_progress)
    with Warehouse(db_path) as wh:
        columns, rows = wh.query("audit_quality_for", teacher=teacher, consolidator=config.consolidator)
        _, kinds = wh.query("consolidation_kind_counts", teacher=teacher, consolidator=config.consolidator)
        run = wh.one("consolidation_run_lineage", consolidation_run_id=result.consolidation_run_id)
    metrics = dict(zip(columns, rows[0])) if rows else {}
    lineage = dict(zip(("consolidator_model", "consolidator_prompt_sha", "bank_id", "bank_version_used",
                        "new_bank_version", "code_version"), run or ()))
    metadata: dict[str, dg.MetadataValue] = id_metadata(lineage | {"run_id": context.run.run_id}) | {
        "consolidator": dg.MetadataValue.text(config.consolidator),
        "consolidation_run_id": dg.MetadataValue.text(result.consolidation_run_id),
        "episodes_planned": dg.MetadataValue.int(result.planned),
        "episodes_consolidated": dg.MetadataValue.int(result.consolidated),
        "episodes_failed": dg.MetadataValue.int(result.failed),
        "bank_versions_created": dg.MetadataValue.text(", ".join(map(str, result.bank_versions)) or "none"),
        "audit": dg.MetadataValue.md(markdown_table(columns, rows)),
    }
    for name in ("belief_precision", "belief_recall", "progress_validity", "parse_validity"):
        if metrics.get(name) is not None:
            metadata[name] = dg.MetadataValue.float(float(metrics[name]))
    if result.input_tokens is not None:
        metadata["llm_input_tokens"] = dg.MetadataValue.int(result.input_tokens)
    if result.output_tokens is not None:
        metadata["llm_output_tokens"] = dg.MetadataValue.int(result.output_tokens)
    if kinds:
        chart = bar_chart_png([k[0] for k in kinds], [float(k[1]) for k in kinds],
                              f"{teacher} / {config.consolidator}: examples by kind", "examples")
        metadata["examples_by_kind"] = dg.MetadataValue.md(markdown_image(chart, "examples by kind"))
    return dg.MaterializeResult(metadata=metadata)


@dg.asset_check(asset=bpe_examples, blocking=True,
                description="Belief precision/recall, Progress validity, parse validity and coverage of the latest "
                            "consolidation of this teacher are at or above QualityThresholds.")
@one_line_failures
def bpe_examples_quality(context: dg.AssetCheckExecutionContext, warehouse: WarehouseResource) -> dg.AssetCheckResult:
    teacher = context.partition_key if context.has_partition_key else "expert"
    thresholds = QualityThresholds()
    consolidator = _materialized_consolidator(context)  # the consolidator the checked materialization used
    if consolidator is None:
        return dg.AssetCheckResult(passed=False, metadata={"reason": dg.MetadataValue.text("no consolidation")})
    with warehouse.open() as wh:
        gate = quality_gate(wh, teacher, consolidator, thresholds)
    metadata: dict[str, dg.MetadataValue] = {
        "consolidator": dg.MetadataValue.text(consolidator),
        "failures": dg.MetadataValue.text("; ".join(gate.failures) or "none"),
        "thresholds": dg.MetadataValue.json(thresholds.model_dump()),
    }
    for name, value in gate.metrics.items():
        if value is not None:
            metadata[name] = dg.MetadataValue.float(float(value))
    return dg.AssetCheckResult(passed=gate.passed, metadata=metadata)


def _materialized_consolidator(context: dg.AssetCheckExecutionContext) -> str | None:
    """The consolidator named in the metadata of this partition's latest ``bpe_examples`` materialization."""
    value = materialized_value(context.instance, "bpe_examples", "consolidator",
                               context.partition_key if context.has_partition_key else None)
    return None if value is None else str(value)
