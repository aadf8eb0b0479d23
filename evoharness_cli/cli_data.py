"""``evoharness consolidate | audit | curate | backfill-lineage``: the data side of the pipeline on the command
line."""

from __future__ import annotations

import json
import logging
from typing import Annotated, Any

import typer

from evoharness.consolidation.audit import AUDIT_VIEWS, quality_gate, read_view
from evoharness.consolidation.config import ConsolidationConfig, LLMSettings, QualityThresholds
from evoharness.consolidation.pipeline import EpisodeOutcome, consolidate
from evoharness.curation.backfill import BackfillError, backfill_dataset_examples, datasets_without_lineage
from evoharness.curation.build import curate
from evoharness.curation.config import CurationConfig
from evoharness.lineage import new_run_id
from evoharness.stage_config import defaults
from evoharness_cli.cli_common import DbOption, console, fail, print_table, quiet_third_party
from evoharness_cli.settings_options import with_config_options
from warehouse import Warehouse, default_db_path

CONSOLIDATE = defaults(ConsolidationConfig)  # the one declaration of the defaults: consolidation.config
LLM = defaults(LLMSettings)


def consolidate_command(
    teacher: Annotated[str, typer.Option(help="Teacher whose stored episodes to consolidate.")
                       ] = CONSOLIDATE["teacher"],
    consolidator: Annotated[str, typer.Option(help="rule (offline default) or llm.")] = CONSOLIDATE["consolidator"],
    split: Annotated[list[str] | None, typer.Option(help="Source splits (repeatable). "
                                                         f"[default: {CONSOLIDATE['splits']}]")] = None,
    limit: Annotated[int | None, typer.Option(help="At most N source episodes.")] = CONSOLIDATE["limit"],
    engine: Annotated[str | None, typer.Option(help="Replay engine: textworld or fast.")] = CONSOLIDATE["engine"],
    workers: Annotated[int | None, typer.Option(help="Replay worker processes [default: by engine].")
                       ] = CONSOLIDATE["workers"],
    concurrency: Annotated[int, typer.Option(help="Episodes in flight.")] = CONSOLIDATE["concurrency"],
    batch_size: Annotated[int, typer.Option(help="Episodes per bank batch.")] = CONSOLIDATE["batch_size"],
    reconsolidate: Annotated[bool, typer.Option(help="Redo episodes already consolidated.")
                             ] = CONSOLIDATE["reconsolidate"],
    llm_teacher: Annotated[str, typer.Option(help="LLM consolidator: registered teacher whose model annotates.")
                           ] = LLM["teacher"],
    llm_max_attempts: Annotated[int, typer.Option(help="LLM calls per episode before it fails.")
                                ] = LLM["max_attempts"],
    db: DbOption = None,
) -> None:
    """Replay stored episodes, annotate them with meta-actions, audit them, and evolve the skill bank."""
    from evoharness.consolidation.llm import build_llm_consolidator
    from evoharness.consolidation.rules import RuleConsolidator

    logging.basicConfig(level=logging.WARNING)
    settings = LLMSettings(teacher=llm_teacher, max_attempts=llm_max_attempts)
    config = ConsolidationConfig(
        teacher=teacher, consolidator=consolidator, splits=tuple(split or CONSOLIDATE["splits"]), limit=limit,  # type: ignore[arg-type]
        engine=engine,
        workers=workers, concurrency=concurrency, batch_size=batch_size, reconsolidate=reconsolidate, llm=settings,
    )
    path = db or default_db_path()
    check_sources(path, teacher, config.splits)
    worker = RuleConsolidator() if consolidator == "rule" else build_llm_consolidator(settings)

    def report_failure(done: int, total: int, outcome: EpisodeOutcome) -> None:
        if outcome.failure:
            console.print(f"[yellow]{outcome.episode.episode_id}: {outcome.failure}")

    result = consolidate(config, path, worker, new_run_id(), on_progress=report_failure)
    console.print(f"{result.consolidation_run_id}: planned {result.planned}, consolidated {result.consolidated}, "
                  f"failed {result.failed}, bank versions {result.bank_versions or 'unchanged'} "
                  f"in {result.seconds:.1f}s")
    with Warehouse(path, read_only=False) as wh:  # this teacher and consolidator only, not every one stored
        columns, rows = wh.query("audit_quality_for", teacher=teacher, consolidator=consolidator)
    print_table(f"audit_quality of {teacher} / {consolidator} (every consolidated episode, this run's included)",
                columns, rows)


def check_sources(path: object, teacher: str, splits: tuple[str, ...]) -> None:
    """Fail with a hint when ``teacher`` has no finished episodes on ``splits`` (instead of "planned 0")."""
    with Warehouse(path) as wh:  # type: ignore[arg-type]
        _, rows = wh.query("finished_episodes_by_split")
    have = {(t, split): n for t, split, n in rows}
    if any((teacher, split) in have for split in splits):
        return
    mine = ", ".join(f"{split}: {n}" for (t, split), n in have.items() if t == teacher)
    if not mine:
        others = sorted({t for t, _ in have})
        raise fail(f"--teacher {teacher!r} has no finished episodes in {path} "
                   f"(teachers with episodes: {', '.join(others) or 'none'}); collect first: "
                   f"`evoharness collect --teacher {teacher} --split train`")
    raise fail(f"--teacher {teacher!r} has no finished episodes on {', '.join(splits)} (consolidate reads --split "
               f"train unless told; it has {mine}). Collect train episodes (`evoharness collect --teacher {teacher} "
               f"--split train`; validation games never enter a training set) or pass --split to consolidate others")


def audit_command(
    view: Annotated[list[str] | None, typer.Option(help=f"Views to print (default: all of {', '.join(AUDIT_VIEWS)}).")] = None,
    teacher: Annotated[str | None, typer.Option(help="Also judge this teacher against the thresholds.")] = None,
    consolidator: Annotated[str, typer.Option(help="Consolidator to judge.")] = "rule",
    db: DbOption = None,
) -> None:
    """Print the audit views (Belief accuracy, Progress validity, parse validity, coverage, cost, bank)."""
    with Warehouse(db or default_db_path()) as wh:
        for name in view or AUDIT_VIEWS:
            print_table(name, *read_view(wh, name))
        if teacher:
            gate = quality_gate(wh, teacher, consolidator, QualityThresholds())
            console.print(f"quality gate {teacher}/{consolidator}: {'PASS' if gate.passed else 'FAIL'} "
                          f"{json.dumps(gate.metrics)} {'; '.join(gate.failures)}")
            if not gate.passed:
                raise typer.Exit(1)


@with_config_options(CurationConfig, exclude=set())
def curate_command(
    force: Annotated[bool, typer.Option(help="Curate even when the quality gate fails.")] = False,
    db: DbOption = None,
    values: dict[str, Any] | None = None,
) -> None:
    """Build a curated Hugging Face SFT dataset from consolidated examples (train games only)."""
    quiet_third_party()
    config = CurationConfig(**(values or {}))
    teacher, consolidator = config.teacher, config.consolidator
    with Warehouse(db or default_db_path()) as wh:
        gate = quality_gate(wh, teacher, consolidator, QualityThresholds())
        if not gate.passed and not force:
            console.print(f"[red]quality gate failed: {'; '.join(gate.failures)}")
            raise typer.Exit(1)
        result = curate(wh, config, new_run_id())
    console.print(f"{result.dataset_id} at {result.path}{' (unchanged, reused)' if result.reused else ''}: "
                  f"train {result.n_train}, validation {result.n_validation}, bank v{result.bank_version}")
    composition = [(group, item, count) for group, counts in result.composition.items()
                   for item, count in (counts.items() if isinstance(counts, dict) else [("", counts)])]
    print_table(f"{result.dataset_id}: composition", ["group", "item", "count"], composition)
    print_table(f"{result.dataset_id}: dropped", ["reason", "count"], sorted(result.dropped.items()))


def backfill_lineage_command(db: DbOption = None) -> None:
    """Write the dataset_examples lineage of datasets curated before it existed, from their saved folders."""
    quiet_third_party()
    rows = []
    with Warehouse(db or default_db_path()) as wh:
        for dataset_id in datasets_without_lineage(wh):
            try:
                rows.append((dataset_id, backfill_dataset_examples(wh, dataset_id), ""))
            except BackfillError as exc:
                rows.append((dataset_id, 0, str(exc)))
    print_table("dataset_examples backfilled", ["dataset", "examples", "problem"], rows)
    if any(problem for *_, problem in rows):
        raise typer.Exit(1)
