"""``evoharness evaluate | compare | students | losses``: play model versions on the evaluation splits, compare two
policies game by game, rank a teacher's students, and say where a policy's lost games stopped."""

from __future__ import annotations

from collections import defaultdict
from typing import Annotated, Any

import typer

from evoharness.agents.records import EpisodeRecord
from evoharness.collection import CollectionResult
from evoharness.evaluation.compare import PairedOutcome, paired_outcomes
from evoharness.evaluation.losses import LOSS_COLUMNS, loss_table, lost_games
from evoharness.evaluation.run import EVAL_SPLITS, EvaluationConfig, EvaluationResult, evaluate
from evoharness.lineage import new_run_id
from evoharness.stage_config import description
from evoharness_cli.cli_common import (
    DbOption,
    console,
    print_table,
    progress_reporter,
    quiet_third_party,
)
from evoharness_cli.settings_options import with_config_options
from warehouse import Warehouse, default_db_path


@with_config_options(EvaluationConfig, exclude={"model_version", "splits", "workers", "data_root"})
def evaluate_command(
    model_version: Annotated[str, typer.Option(help=description(EvaluationConfig, "model_version"))],
    split: Annotated[list[str] | None, typer.Option(help=f"{description(EvaluationConfig, 'splits')} Repeatable. "
                                                          f"[default: {' and '.join(EVAL_SPLITS)}]")] = None,
    db: DbOption = None,
    values: dict[str, Any] | None = None,
) -> None:
    """Play a model version on the evaluation splits (resumable), print the games this run played, and the
    stored totals of those splits beside its teacher."""
    config = EvaluationConfig(model_version=model_version, splits=tuple(split or EVAL_SPLITS), **(values or {}))
    quiet_third_party()
    with Warehouse(db or default_db_path()) as wh, progress_reporter(f"{config.policy} evaluation") as update:
        current = {"split": ""}

        def on_progress(split_name: str, done: int, total: int, record: object) -> None:
            if split_name != current["split"]:  # the splits play one after another: each is timed on its own
                current["split"] = split_name
                update.phase(split_name)
            update(done, total, "")

        result = evaluate(wh, config, new_run_id(), on_progress=on_progress)
    print_evaluation(result, config)


PLAYED_COLUMNS = ["split", "task_type", "planned", "already_stored", "played", "failed", "won",
                  "success_rate", "mean_steps", "mean_harness_calls"]


def played_rows(by_split: dict[str, CollectionResult]) -> list[tuple]:
    """Per split and task type, the episodes this run played (its ``ALL`` row also says how many the split
    planned and how many were already stored, so kept, not replayed). Success is over finished episodes, as in
    ``policy_evaluation``."""
    rows: list[tuple] = []
    for split, played in by_split.items():
        by_type: dict[str, list[EpisodeRecord]] = defaultdict(list)
        for record in played.records:
            by_type[record.spec.game.task_type].append(record)
        for task_type, records in sorted(by_type.items()):
            rows.append((split, task_type, "", "", *_outcomes(records)))
        rows.append((split, "ALL", played.planned, played.skipped, *_outcomes(played.records)))
    return rows


def _outcomes(records: list[EpisodeRecord]) -> tuple:
    failed = sum(r.status == "failed" for r in records)
    won = sum(r.won for r in records)
    finished = len(records) - failed
    return (len(records), failed, won, round(won / finished, 3) if finished else None,
            round(sum(len(r.steps) for r in records) / len(records), 1) if records else None,
            round(sum(r.n_harness_calls for r in records) / len(records), 2) if records else None)


def print_evaluation(result: EvaluationResult, config: EvaluationConfig) -> None:
    """The closing tables: what this run played (every split it was asked for), then the stored totals of the
    same splits beside the teacher (``policy_evaluation`` covers valid_seen and valid_unseen only)."""
    print_table(f"{result.policy} ({result.mode.value}, {config.max_steps} steps): played by this run",
                PLAYED_COLUMNS, played_rows(result.by_split))
    index = result.columns.index("split")
    stored = [row for row in result.rows if row[index] in config.splits]
    if stored:
        shown = ", ".join(sorted({row[index] for row in stored}))
        print_table(f"{result.policy} ({result.mode.value}, {config.max_steps} steps) beside its teacher: "
                    f"all stored episodes of {shown}", result.columns, stored)
    elsewhere = [s for s in config.splits if s not in EVAL_SPLITS]
    if elsewhere:
        console.print(f"{', '.join(elsewhere)}: no comparison table (policy_evaluation covers "
                      f"{' and '.join(EVAL_SPLITS)}); the first table is this run's games.")


def compare_command(
    policy: Annotated[str, typer.Argument(help="A policy: a model version, '<version>.no-repeat', a teacher.")],
    baseline: Annotated[str, typer.Argument(help="The policy it is compared with (e.g. its parent version).")],
    max_steps: Annotated[int, typer.Option(help="Step budget both played at.")] = 70,
    db: DbOption = None,
) -> None:
    """Two policies game by game on the games both played: how many only one of them won, the success gain and
    the exact McNemar p of that split."""
    with Warehouse(db or default_db_path(), read_only=True) as wh:
        outcomes = paired_outcomes(wh, policy, baseline, max_steps)
    if not outcomes:
        raise typer.BadParameter(f"{policy!r} and {baseline!r} played no game to the end at {max_steps} steps in "
                                 f"common (see `evoharness evaluate`)")
    print_table(f"{policy} against {baseline} ({max_steps} steps), game by game", list(PairedOutcome.COLUMNS),
                [o.row() for o in outcomes])


def students_command(
    teacher: Annotated[str | None, typer.Option(help="One teacher's students [default: every teacher's].")] = None,
    db: DbOption = None,
) -> None:
    """Each teacher's students on dev and the held-out splits, and the one to use: dev_rank 1, the version that won
    the most of the whole dev split (where choices are made; a tie goes to the earlier version)."""
    with Warehouse(db or default_db_path(), read_only=True) as wh:
        columns, rows = wh.query("teacher_students_for", teacher=teacher)
    if not rows:
        raise typer.BadParameter(f"no student of {teacher or 'any teacher'} has been evaluated (see `evoharness "
                                 "evaluate`)")
    print_table(f"students of {teacher or 'every teacher'}: the one to use is dev_rank 1", columns, rows)


def losses_command(
    policy: Annotated[str, typer.Argument(help="A policy: a model version, '<version>.no-repeat', a teacher.")],
    split: Annotated[str, typer.Option(help="The split whose lost games are read (choices are made on dev).")] = "dev",
    max_steps: Annotated[int, typer.Option(help="Step budget it played at.")] = 70,
    db: DbOption = None,
) -> None:
    """Where a policy's lost games stopped: each lost episode at the first stage of its goal it never got past
    (target never seen, seen not taken, taken not transformed, not placed, one of two placed, every step done), by
    task type, with how many picked up an object of another type and ran out their budget, and the places they
    visited."""
    with Warehouse(db or default_db_path(), read_only=True) as wh:
        lost = lost_games(wh, policy, split, max_steps)
    if not lost:
        raise typer.BadParameter(f"{policy!r} lost no game it finished on {split} at {max_steps} steps (see "
                                 "`evoharness evaluate`)")
    print_table(f"where {policy}'s {len(lost)} lost {split} games stopped ({max_steps} steps)", list(LOSS_COLUMNS),
                loss_table(lost))
