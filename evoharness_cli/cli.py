"""The ``evoharness`` command line: the library's face for people and scripts."""

from __future__ import annotations

import logging
import os
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Annotated

import typer

from evoharness.collection import CollectionConfig, CollectionResult, collect
from evoharness.envs.alfworld.catalog import SPLITS, AlfworldDataError, GameCatalog
from evoharness.harness.prompts import Mode
from evoharness.lineage import new_run_id
from evoharness.run_guard import StopKind
from evoharness.stage_config import defaults
from evoharness_cli.cli_common import (
    EXIT_STOPPED,
    DbOption,
    OutputFormat,
    SafeGroup,
    console,
    fail,
    print_table,
    progress_reporter,
    set_output_format,
)
from evoharness_cli.cli_data import (
    audit_command,
    backfill_lineage_command,
    consolidate_command,
    curate_command,
)
from evoharness_cli.cli_evaluation import compare_command, evaluate_command, losses_command, students_command
from evoharness_cli.cli_serve import serve_command
from evoharness_cli.cli_teachers import teacher_app
from evoharness_cli.cli_training import dagger_command, grpo_command, relabel_command, sft_command
from warehouse import Warehouse, default_db_path

app = typer.Typer(help="EvoHarness-RL distillation pipeline: teachers → warehouse → student.", no_args_is_help=True,
                  cls=SafeGroup)
app.add_typer(teacher_app, name="teacher")


@app.callback()
def main(
    output_format: Annotated[OutputFormat, typer.Option(
        "--format", envvar="EVOHARNESS_FORMAT",
        help="table (for people), json (one object per table) or csv; json/csv write tables to stdout and "
             "everything else to stderr.")] = OutputFormat.TABLE,
) -> None:
    """EvoHarness-RL distillation pipeline: teachers → warehouse → student."""
    set_output_format(output_format)

def games(
    split: Annotated[str, typer.Option(help=f"One of {', '.join(SPLITS)}.")] = "valid_seen",
    limit: Annotated[int | None, typer.Option(help="First N games in catalog order [default: all].", min=1)] = None,
) -> None:
    """List the games of a split (catalog order: round-robin over the six task types)."""
    try:
        found = GameCatalog().games(split, limit)
    except (AlfworldDataError, ValueError) as exc:
        raise typer.BadParameter(str(exc)) from exc
    print_table(f"{split}: {len(found)} games", ["game_id", "task_type"], [(g.game_id, g.task_type) for g in found])


COLLECT = defaults(CollectionConfig)  # the one declaration of the defaults: evoharness.collection
COLLECT_MODE = Mode(COLLECT["mode"])


def collect_command(
    teacher: Annotated[str, typer.Option(help="Registered teacher name.")] = COLLECT["teacher"],
    mode: Annotated[Mode, typer.Option(help="bpe (workspace + meta-actions) or react.")] = COLLECT_MODE,
    split: Annotated[str, typer.Option(help=f"One of {', '.join(SPLITS)}.")] = COLLECT["split"],
    limit: Annotated[int | None, typer.Option(help="First N games of the split [default: all].", min=1)
                     ] = COLLECT["limit"],
    seed: Annotated[list[int] | None, typer.Option(help="Episode seed; repeat for more episodes per game. "
                                                        f"[default: {COLLECT['seeds']}]")] = None,
    max_steps: Annotated[int, typer.Option(help="Step budget per episode.", min=1)] = COLLECT["max_steps"],
    meta_action_cost: Annotated[int, typer.Option(help="Steps a meta-action costs.", min=0)
                                ] = COLLECT["meta_action_cost"],
    workers: Annotated[int | None, typer.Option(help="Environment worker processes [default: 0 for the fast "
                                                       "engine, 2 for textworld].", min=0)] = COLLECT["workers"],
    concurrency: Annotated[int | None, typer.Option(help="Episodes in flight [default: the teacher's "
                                                         "max_concurrency, which also caps it].", min=1)
                           ] = COLLECT["concurrency"],
    engine: Annotated[str | None, typer.Option(help="textworld or fast (default: the library default).")
                      ] = COLLECT["engine"],
    bank_version: Annotated[int | None, typer.Option(help="bpe mode: recall from this frozen Experience bank "
                                                      "version of the warehouse [default: the seed bank].")
                            ] = COLLECT["bank_version"],
    max_spend_usd: Annotated[float | None, typer.Option(help="Stop starting episodes once this run has spent this "
                                                        "many USD (the teacher's own cap applies too).", min=0)
                             ] = COLLECT["max_spend_usd"],
    max_consecutive_failures: Annotated[int, typer.Option(help="Stop the run after this many calls in a row failed "
                                                          "to connect, authenticate or find the model.", min=1)
                                        ] = COLLECT["max_consecutive_failures"],
    preflight: Annotated[bool, typer.Option(help="One real call checks an API teacher before the run fans "
                                            "out.")] = COLLECT["preflight"],
    dry_run: Annotated[bool, typer.Option(help="Only estimate the run's tokens and dollars; call and store "
                                          "nothing.")] = False,
    db: DbOption = None,
) -> None:
    """Play a teacher on a split and store every episode, step and harness call in the warehouse.

    Exit codes: 0 done; 1 error (bad input, failed preflight, circuit breaker, nothing succeeded);
    3 stopped at a spend cap (rerun after raising the cap to resume)."""
    logging.basicConfig(level=logging.ERROR)
    config = CollectionConfig(
        teacher=teacher, mode=mode, split=split, limit=limit, seeds=tuple(seed or COLLECT["seeds"]), max_steps=max_steps,
        meta_action_cost=meta_action_cost, workers=workers, concurrency=concurrency, engine=engine,
        bank_version=bank_version, max_spend_usd=max_spend_usd, max_consecutive_failures=max_consecutive_failures,
        preflight=preflight,
    )
    if dry_run:
        dry_run_command(config, db)
        return
    with Warehouse(db or default_db_path()) as warehouse, progress_reporter(f"{teacher}/{mode.value} on {split}"
                                                                             ) as update:
        def on_progress(done: int, total: int, record) -> None:  # type: ignore[no-untyped-def]
            outcome = "won" if record.won else record.status if record.status == "failed" else "lost"
            update(done, total, f"{record.spec.game.task_type}: {outcome}")

        try:
            result = collect(config, warehouse, run_id=new_run_id(), on_progress=on_progress)
        except (AlfworldDataError, ValueError, LookupError) as exc:
            raise typer.BadParameter(str(exc).strip("\"'")) from exc
        columns, rows = warehouse.query("teacher_summary", teacher=teacher, mode=mode.value, split=split)
    report_collection(result)
    print_table(f"{teacher} / {mode.value} / {split} (all stored episodes)", columns, rows)
    exit_for(result)


def report_collection(result: CollectionResult) -> None:
    """What the run did, its spend, why episodes failed and why it stopped, in plain lines."""
    rate = f"{result.episodes_per_second:.2f} episodes/s" if result.episodes_per_second else "nothing to run"
    if result.preflight is not None:
        console.print(result.preflight.message, markup=False, highlight=False, soft_wrap=True)
    console.print(
        f"planned {result.planned}, already stored {result.skipped}, ran {len(result.records)} "
        f"(won {result.won}, failed {result.failed}) in {result.seconds:.1f}s — {rate}"
    )
    if result.spent_usd:
        console.print(f"spent ${result.spent_usd:.4f} in this run (preflight included)")
    reasons = Counter(r.failure_reason for r in result.records if r.status == "failed")
    for reason, count in reasons.most_common(5):
        console.print(f"failed {count}: {reason}", markup=False, highlight=False, soft_wrap=True)
    if result.stop_reason:
        console.print(f"stopped: {result.stop_reason}; {result.not_started} planned episode(s) not started "
                      "(stored ones are kept; rerun to resume).", markup=False, highlight=False, soft_wrap=True)


def exit_for(result: CollectionResult) -> None:
    if result.stop_kind is StopKind.CIRCUIT_BREAKER:
        raise fail("the run was stopped by its circuit breaker (see above); fix the teacher and rerun")
    if result.records and result.won == 0 and result.failed == len(result.records):
        raise fail(f"nothing succeeded: all {result.failed} episodes failed (reasons above)")
    if result.stop_kind is StopKind.SPEND_CAP:
        raise fail("the run stopped at its spend cap; raise --max-spend-usd or the teacher's max_spend_usd "
                   "(`evoharness teacher add ... --max-spend-usd`) and rerun to continue", EXIT_STOPPED)


def dry_run_command(config: CollectionConfig, db: Path | None) -> None:
    """Print the estimate of ``config``'s tokens and dollars; nothing is called or stored."""
    from evoharness.collection_estimate import estimate_collection

    with Warehouse(db or default_db_path()) as warehouse:
        try:
            estimate = estimate_collection(config, warehouse)
        except (AlfworldDataError, ValueError, LookupError) as exc:
            raise typer.BadParameter(str(exc).strip("\"'")) from exc
    print_table(f"dry run: {config.teacher} / {config.mode.value} / {config.split} (nothing called or stored)",
                ["estimate", "value"], estimate.rows())


def summary(db: DbOption = None) -> None:
    """Success, steps and harness calls per teacher, mode, split and task type."""
    with Warehouse(db or default_db_path()) as warehouse:
        print_table("episode_summary", *warehouse.query("episode_summary"))


def init(db: DbOption = None) -> None:
    """Prepare a machine: the warehouse schema, and with $DAGSTER_HOME set, dagster.yaml and teacher partitions."""
    with Warehouse(db or default_db_path()) as warehouse:
        versions = warehouse.value("schema_version_latest")
    console.print(f"warehouse {warehouse.path}: schema version {versions}")
    home = os.environ.get("DAGSTER_HOME")
    if not home:
        console.print("DAGSTER_HOME is not set: skipped the Dagster instance (set it to use the dagster CLI).")
        return
    from dagster import DagsterInstance  # the one command that sets up Dagster; imported only here

    from evoharness.teachers.registry import TeacherRegistry
    from pipelines.instance import write_instance_config
    from pipelines.partitions import reconcile_teachers

    wrote = write_instance_config(home)
    console.print(f"Dagster instance {home}: dagster.yaml {'written' if wrote else 'kept (it exists)'}")
    with DagsterInstance.get() as instance:
        added, removed = reconcile_teachers(instance, tuple(TeacherRegistry.load().names()))
    console.print(f"Dagster instance {home}: teacher partitions from the registry: added "
                  f"{', '.join(added) or 'none'}; removed {', '.join(removed) or 'none'}")


COMMANDS: dict[str, Callable[..., None]] = {
    "games": games, "collect": collect_command, "summary": summary, "init": init,
    "consolidate": consolidate_command, "audit": audit_command, "curate": curate_command,
    "backfill-lineage": backfill_lineage_command,
    "sft": sft_command, "dagger": dagger_command, "grpo": grpo_command, "relabel": relabel_command,
    "evaluate": evaluate_command, "compare": compare_command, "students": students_command, "losses": losses_command,
    "serve": serve_command,
}
"""Every ``evoharness`` command by name (``teacher ...`` is the sub-app of evoharness_cli.cli_teachers)."""
for command_name, command in COMMANDS.items():
    app.command(command_name)(command)

if __name__ == "__main__":
    app()
