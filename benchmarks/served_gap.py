"""How a served student differs from the same model played locally: the version played greedily on the first
``--limit`` train games with and without the action constraint (in a copy of the warehouse), beside the episodes
the served teacher ``--teacher`` stored on the same games; and where each lost game's served trajectory first
parts from the local unconstrained one (turn, actions, whether the prompts differed).

    ALFWORLD_DATA=../shared/alfworld python benchmarks/served_gap.py --db WAREHOUSE --model-version V \\
        --teacher SERVED_TEACHER [--limit 40]

Writes ``benchmarks/results/served_gap.json``.
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
from pathlib import Path
from typing import Any

import report

from evoharness.evaluation.run import EvaluationConfig, evaluate
from warehouse import Warehouse


def first_parting(wh: Warehouse, local: str, served: str) -> dict[str, Any] | None:
    """The first turn where the served episode's action or prompt differs from the local one's."""
    turns = {}
    for name, episode in (("local", local), ("served", served)):
        turns[name] = wh.con.execute("SELECT t, action, prompt FROM steps WHERE episode_id = ? ORDER BY t",
                                     [episode]).fetchall()
    for (t, action, prompt), (_, served_action, served_prompt) in zip(turns["local"], turns["served"], strict=False):
        if action != served_action or prompt != served_prompt:
            return {"turn": t, "local": action, "served": served_action, "prompts_differ": prompt != served_prompt}
    return None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--db", type=Path, required=True)
    parser.add_argument("--model-version", required=True)
    parser.add_argument("--teacher", required=True, help="the registered teacher that served this version")
    parser.add_argument("--limit", type=int, default=40)
    args = parser.parse_args()
    won: dict[str, dict[str, bool]] = {}
    episode: dict[str, dict[str, str]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for constrained in (True, False):
            db = Path(shutil.copy(args.db, Path(tmp) / f"{constrained}.duckdb"))  # plays nothing already stored
            with Warehouse(db) as wh:
                result = evaluate(wh, EvaluationConfig(model_version=args.model_version, splits=("train",),
                                                       limit=args.limit, constrain_actions=constrained),
                                  f"served-gap-{constrained}")
            if result.by_split["train"].skipped:
                raise SystemExit(f"{args.model_version} already played train games: this compares fresh play")
            key = "constrained" if constrained else "unconstrained"
            records = result.by_split["train"].records
            won[key] = {r.spec.game.game_id: r.won for r in records}
            episode[key] = {r.spec.game.game_id: r.spec.episode_id for r in records}
        with Warehouse(db, read_only=True) as wh:
            served = {game: (eid, bool(w)) for game, eid, w in wh.con.execute(
                "SELECT game_id, episode_id, won FROM episodes WHERE teacher = ? AND status = 'finished'",
                [args.teacher]).fetchall()}
            games = [g for g in won["constrained"] if g in served]
            partings = [first_parting(wh, episode["unconstrained"][g], served[g][0]) for g in games
                        if won["unconstrained"][g] and not served[g][1]]
    result_row = {"model_version": args.model_version, "teacher": args.teacher, "games": len(games),
                  "won": {"local_constrained": sum(won["constrained"][g] for g in games),
                          "local_unconstrained": sum(won["unconstrained"][g] for g in games),
                          "served": sum(served[g][1] for g in games)},
                  "lost_only_served": partings}
    report.write_report(report.RESULTS / "served_gap.json", result_row,
                        command=report.command_line().replace(str(args.db), "WAREHOUSE"))
    print(result_row["won"])


if __name__ == "__main__":
    main()
