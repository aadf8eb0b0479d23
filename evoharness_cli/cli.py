"""The ``evoharness`` command line: the library's face for people and scripts."""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Annotated

import typer
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from evoharness.collection import CollectionConfig, collect
from evoharness.envs.alfworld.catalog import SPLITS, AlfworldDataError, GameCatalog
from evoharness.harness.prompts import Mode
from evoharness.lineage import new_run_id
from evoharness.stage_config import defaults
from evoharness_cli.cli_common import DbOption, console, print_table
from evoharness_cli.cli_data import register as register_data_commands
from evoharness_cli.cli_teachers import teacher_app
from evoharness_cli.cli_training import evaluate_command, grpo_command, sft_command
from warehouse import Warehouse, default_db_path

app = typer.Typer(help="EvoHarness-RL distillation pipeline: teachers → warehouse → student.", no_args_is_help=True)
app.add_typer(teacher_app, name="teacher")

@app.command()
def games(
    split: Annotated[str, typer.Option(help=f"One of {', '.join(SPLITS)}.")] = "valid_seen",
    limit: Annotated[int | None, typer.Option(help="First N games in catalog order.")] = None,
) -> None:
    """List the games of a split (catalog order: round-robin over the six task types)."""
    try:
        found = GameCatalog().games(split, limit)
    except (AlfworldDataError, ValueError) as exc:
        raise typer.BadParameter(str(exc)) from exc
    print_table(f"{split}: {len(found)} games", ["game_id", "task_type"], [(g.game_id, g.task_type) for g in found])


COLLECT = defaults(CollectionConfig)  # the one declaration of the defaults: evoharness.collection
COLLECT_MODE = Mode(COLLECT["mode"])


@app.command("collect")
def collect_command(
    teacher: Annotated[str, typer.Option(help="Registered teacher name.")] = COLLECT["teacher"],
    mode: Annotated[Mode, typer.Option(help="bpe (workspace + meta-actions) or react.")] = COLLECT_MODE,
    split: Annotated[str, typer.Option(help=f"One of {', '.join(SPLITS)}.")] = COLLECT["split"],
    limit: Annotated[int | None, typer.Option(help="First N games of the split [default: all].")] = COLLECT["limit"],
    seed: Annotated[list[int] | None, typer.Option(help="Episode seed; repeat for more episodes per game. "
                                                        f"[default: {COLLECT['seeds']}]")] = None,
    max_steps: Annotated[int, typer.Option(help="Step budget per episode.")] = COLLECT["max_steps"],
    meta_action_cost: Annotated[int, typer.Option(help="Steps a meta-action costs.")] = COLLECT["meta_action_cost"],
    workers: Annotated[int | None, typer.Option(help="Environment worker processes [default: 0 for the fast "
                                                       "engine, 2 for textworld].")] = COLLECT["workers"],
    concurrency: Annotated[int | None, typer.Option(help="Episodes in flight [default: the teacher's "
                                                         "max_concurrency, which also caps it].")
                           ] = COLLECT["concurrency"],
    engine: Annotated[str | None, typer.Option(help="textworld or fast (default: the library default).")
                      ] = COLLECT["engine"],
    bank_version: Annotated[int | None, typer.Option(help="bpe mode: recall from this frozen Experience bank "
                                                      "version of the warehouse [default: the seed bank].")
                            ] = COLLECT["bank_version"],
    db: DbOption = None,
) -> None:
    """Play a teacher on a split and store every episode, step and harness call in the warehouse."""
    logging.basicConfig(level=logging.WARNING)
    config = CollectionConfig(
        teacher=teacher, mode=mode, split=split, limit=limit, seeds=tuple(seed or COLLECT["seeds"]), max_steps=max_steps,
        meta_action_cost=meta_action_cost, workers=workers, concurrency=concurrency, engine=engine,
        bank_version=bank_version,
    )
    with Warehouse(db or default_db_path()) as warehouse, Progress(
        TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
        TextColumn("{task.fields[last]}"), console=console,
    ) as progress:
        bar = progress.add_task(f"{teacher}/{mode.value} on {split}", total=None, last="")

        def on_progress(done: int, total: int, record) -> None:  # type: ignore[no-untyped-def]
            outcome = "won" if record.won else record.status if record.status == "failed" else "lost"
            progress.update(bar, completed=done, total=total, last=f"{record.spec.game.task_type}: {outcome}")

        try:
            result = collect(config, warehouse, run_id=new_run_id(), on_progress=on_progress)
        except (AlfworldDataError, ValueError, KeyError) as exc:
            raise typer.BadParameter(str(exc)) from exc
        columns, rows = warehouse.query("teacher_summary", teacher=teacher, mode=mode.value, split=split)
    rate = f"{result.episodes_per_second:.2f} episodes/s" if result.episodes_per_second else "nothing to run"
    console.print(
        f"planned {result.planned}, already stored {result.skipped}, ran {len(result.records)} "
        f"(won {result.won}, failed {result.failed}) in {result.seconds:.1f}s — {rate}"
    )
    print_table(f"{teacher} / {mode.value} / {split} (all stored episodes)", columns, rows)


@app.command()
def summary(db: DbOption = None) -> None:
    """Success, steps and harness calls per teacher, mode, split and task type."""
    with Warehouse(db or default_db_path()) as warehouse:
        cursor = warehouse.con.execute("SELECT * FROM episode_summary ORDER BY ALL")
        print_table("episode_summary", [d[0] for d in cursor.description], cursor.fetchall())


@app.command()
def init(db: DbOption = None) -> None:
    """Prepare a machine: the warehouse schema, and with $DAGSTER_HOME set, dagster.yaml and teacher partitions."""
    with Warehouse(db or default_db_path()) as warehouse:
        versions = warehouse.scalar("SELECT max(version) FROM schema_version")
    console.print(f"warehouse {warehouse.path}: schema version {versions}")
    home = os.environ.get("DAGSTER_HOME")
    if not home:
        console.print("DAGSTER_HOME is not set: skipped the Dagster instance (set it to use the dagster CLI).")
        return
    from dagster import DagsterInstance  # the one command that sets up Dagster; imported only here

    from evoharness.teachers.registry import TeacherRegistry
    from pipelines.partitions import reconcile_teachers

    config = Path(home) / "dagster.yaml"
    config.parent.mkdir(parents=True, exist_ok=True)
    if not config.exists():
        config.write_text("telemetry:\n  enabled: false\n")
    with DagsterInstance.get() as instance:
        added, removed = reconcile_teachers(instance, tuple(TeacherRegistry.load().names()))
    console.print(f"Dagster instance {home}: teacher partitions from the registry: added "
                  f"{', '.join(added) or 'none'}; removed {', '.join(removed) or 'none'}")


register_data_commands(app)
app.command("sft")(sft_command)
app.command("grpo")(grpo_command)
app.command("evaluate")(evaluate_command)

if __name__ == "__main__":
    app()
