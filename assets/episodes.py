"""``teacher_episodes``: a teacher's episodes on ALFWorld games, one partition per teacher."""



import dagster as dg
from pydantic import Field

from assets.failures import one_line_failures
from assets.lineage import ASSET_CODE_VERSION, collection_lineage
from evoharness.collection import CollectionConfig, CollectionConfigError, collect
from evoharness.envs.alfworld.catalog import SPLITS
from evoharness.harness.prompts import Mode
from evoharness.reporting.charts import bar_chart_png, markdown_image, markdown_table
from evoharness.stage_config import defaults
from evoharness.teachers.preflight import PreflightError
from pipelines.partitions import teacher_partitions
from pipelines.resources import AlfworldResource, WarehouseResource

DEFAULTS = defaults(CollectionConfig)  # the one declaration of the defaults: evoharness.collection


class CollectionRunConfig(dg.Config):
    """Run config of a collection: which games, how, and how much in parallel (defaults: CollectionConfig)."""

    split: str = Field(default=DEFAULTS["split"], description=f"One of {', '.join(SPLITS)}.")
    limit: int | None = Field(default=DEFAULTS["limit"], description="First N games of the split (None: all).")
    mode: str = Field(default=DEFAULTS["mode"], description="bpe or react.")
    seeds: list[int] = Field(default=DEFAULTS["seeds"], description="One episode per game and seed.")
    max_steps: int = Field(default=DEFAULTS["max_steps"], description="Step budget per episode.")
    meta_action_cost: int = Field(default=DEFAULTS["meta_action_cost"], description="Steps one meta-action costs.")
    workers: int | None = Field(default=DEFAULTS["workers"], description="Environment worker processes (None: "
                                "by engine).")
    concurrency: int | None = Field(default=DEFAULTS["concurrency"], description="Episodes in flight (None: the "
                                    "teacher's max_concurrency, which also caps it).")
    engine: str | None = Field(default=DEFAULTS["engine"], description="textworld or fast (None: library default).")
    bank_version: int | None = Field(default=DEFAULTS["bank_version"], description="bpe mode: frozen Experience "
                                     "bank version to recall from (None: the seed bank).")
    max_spend_usd: float | None = Field(default=DEFAULTS["max_spend_usd"], description="Stop starting episodes "
                                        "once this run has spent this many USD (the teacher's registry cap "
                                        "applies as well).")
    max_consecutive_failures: int = Field(default=DEFAULTS["max_consecutive_failures"], description="Stop after "
                                          "this many calls in a row failed to connect, authenticate or find the "
                                          "model.")
    preflight: bool = Field(default=DEFAULTS["preflight"], description="One real call checks an API teacher "
                            "before fanning out.")


def collection_config(teacher: str, config: CollectionRunConfig, data_root: str | None) -> CollectionConfig:
    """The library config of a run; a bad value fails the step at once with one line naming the field."""
    try:
        mode = Mode(config.mode)
    except ValueError:
        raise dg.Failure(description=f"teacher_episodes config: mode {config.mode!r} is unknown; use bpe or react",
                         allow_retries=False) from None
    if config.split not in SPLITS:
        raise dg.Failure(description=f"teacher_episodes config: split {config.split!r} is unknown; use one of "
                         f"{', '.join(SPLITS)}", allow_retries=False)
    try:
        return CollectionConfig(
            teacher=teacher, mode=mode, split=config.split, limit=config.limit, seeds=tuple(config.seeds),
            max_steps=config.max_steps, meta_action_cost=config.meta_action_cost, workers=config.workers,
            concurrency=config.concurrency, engine=config.engine, data_root=data_root,
            bank_version=config.bank_version, max_spend_usd=config.max_spend_usd,
            max_consecutive_failures=config.max_consecutive_failures, preflight=config.preflight,
        )
    except CollectionConfigError as exc:
        raise dg.Failure(description=f"teacher_episodes config: {exc}", allow_retries=False) from None


@dg.asset(
    partitions_def=teacher_partitions,
    deps=["alfworld_games"],
    group_name="collection",
    code_version=ASSET_CODE_VERSION,
    kinds={"python", "duckdb"},
    description="Episodes, steps and harness calls of one teacher, written to the warehouse (resumable).",
)
@one_line_failures
def teacher_episodes(
    context: dg.AssetExecutionContext,
    config: CollectionRunConfig,
    alfworld: AlfworldResource,
    warehouse: WarehouseResource,
) -> dg.MaterializeResult:
    teacher = context.partition_key
    collection = collection_config(teacher, config, alfworld.root())

    def on_progress(done: int, total: int, record) -> None:  # type: ignore[no-untyped-def]
        context.log.info(
            "episode %d/%d %s %s (%d steps)", done, total, record.spec.game.game_id,
            "won" if record.won else record.status, len(record.steps),
        )

    with warehouse.open() as wh:
        try:
            result = collect(collection, wh, run_id=context.run.run_id, on_progress=on_progress)
        except PreflightError as exc:
            raise dg.Failure(description=str(exc), allow_retries=False) from None
        if result.stop_reason:
            raise dg.Failure(description=f"{teacher}: {result.stop_reason}; {result.not_started} episodes not "
                             "started (stored ones are kept; rerun to resume)", allow_retries=False)
        if result.records and result.failed == len(result.records):
            raise dg.Failure(description=f"{teacher}: nothing succeeded, all {result.failed} episodes failed; the "
                             f"first reason: {result.records[0].failure_reason}", allow_retries=False)
        columns, rows = wh.query("teacher_summary", teacher=teacher, mode=config.mode, split=config.split)
    # a type (or the whole run) whose episodes all failed has no success rate: it is left out, not drawn as 0
    per_type = [row for row in rows if row[0] != "ALL" and row[4] is not None]
    overall = next((row for row in rows if row[0] == "ALL" and row[4] is not None), None)
    chart = bar_chart_png(
        [row[0] for row in per_type], [float(row[4]) for row in per_type],
        f"{teacher} / {config.mode} / {config.split}: success by task type", "success rate", (0, 1.05),
    ) if per_type else None
    metadata: dict[str, dg.MetadataValue] = collection_lineage(result, context.run.run_id) | {
        "episodes_planned": dg.MetadataValue.int(result.planned),
        "episodes_skipped_already_stored": dg.MetadataValue.int(result.skipped),
        "episodes_written": dg.MetadataValue.int(result.written),
        "episodes_failed": dg.MetadataValue.int(result.failed),
        "summary": dg.MetadataValue.md(markdown_table(columns, rows)),
    }
    if overall is not None:
        metadata["success_rate"] = dg.MetadataValue.float(float(overall[4]))
    if result.episodes_per_second is not None:
        metadata["episodes_per_second"] = dg.MetadataValue.float(round(result.episodes_per_second, 3))
    if chart is not None:
        metadata["success_by_task_type"] = dg.MetadataValue.md(markdown_image(chart, "success by task type"))
    return dg.MaterializeResult(metadata=metadata)


@dg.asset_check(asset=teacher_episodes, blocking=True,
                description="Every episode has steps; no step after done; won episodes end with done; no failed "
                            "episode is stored as won.")
@one_line_failures
def teacher_episodes_integrity(context: dg.AssetCheckExecutionContext, warehouse: WarehouseResource
                               ) -> dg.AssetCheckResult:
    teachers = [context.partition_key] if context.has_partition_key else None
    problems: list[tuple] = []
    with warehouse.open() as wh:
        for teacher in teachers or [r[0] for r in wh.query("episode_teachers")[1]]:
            _, rows = wh.query("check_episode_integrity", teacher=teacher)
            problems.extend(rows)
    return dg.AssetCheckResult(
        passed=not problems,
        metadata={
            "violations": dg.MetadataValue.int(len(problems)),
            "examples": dg.MetadataValue.md(markdown_table(["episode_id", "problem"], problems[:20])),
        },
    )
