"""Evaluate the expert on the fast engine over full evaluation splits (default: valid_seen + valid_unseen).

    python benchmarks/expert_eval.py [--splits valid_seen valid_unseen] [--seed 0] [--max-steps 200]

Prints success per split and task type, mean steps of the wins, and wall time; writes
benchmarks/results/expert_eval.json.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections import Counter
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")
REPO = Path(__file__).resolve().parents[1]
os.environ.setdefault("ALFWORLD_DATA", str(REPO.parent / "shared" / "alfworld"))

from report import RESULTS, write_report

from evoharness.envs.alfworld.catalog import TASK_TYPES, GameCatalog, GameRecord
from evoharness.envs.alfworld.fast_engine import FastAlfworldEnv


def run_expert(game: GameRecord, seed: int, max_steps: int) -> tuple[bool, int]:
    """Play one game with the expert's commands; (won, steps)."""
    env = FastAlfworldEnv(game, expert=True)
    result = env.reset(seed)
    steps = 0
    while not result.done and steps < max_steps:
        plan = result.expert_plan or ("look",)
        result = env.step(plan[0])
        steps += 1
    env.close()
    return result.won, steps


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--splits", nargs="+", default=["valid_seen", "valid_unseen"])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--max-steps", type=int, default=200)
    parser.add_argument("--limit", type=int, default=None)
    parser.add_argument("--output", type=Path, default=RESULTS / "expert_eval.json")
    args = parser.parse_args()

    catalog = GameCatalog()
    start = time.perf_counter()
    total_steps = 0
    splits: dict[str, dict] = {}
    for split in args.splits:
        split_start = time.perf_counter()
        won: Counter[str] = Counter()
        played: Counter[str] = Counter()
        win_steps: Counter[str] = Counter()
        failures: list[str] = []
        for game in catalog.games(split, limit=args.limit):
            ok, steps = run_expert(game, args.seed, args.max_steps)
            total_steps += steps
            played[game.task_type] += 1
            if ok:
                won[game.task_type] += 1
                win_steps[game.task_type] += steps
            else:
                failures.append(game.game_id)
        n_won, n = sum(won.values()), sum(played.values())
        print(f"\n{split}: {n_won}/{n} = {100 * n_won / n:.1f}%  ({time.perf_counter() - split_start:.1f} s)")
        for task in TASK_TYPES:
            if played[task]:
                mean = win_steps[task] / won[task] if won[task] else float("nan")
                print(f"  {task:<34}{won[task]:>4}/{played[task]:<4}{100 * won[task] / played[task]:6.1f}%"
                      f"   mean steps (wins) {mean:5.1f}")
        for game_id in failures:
            print(f"  failed: {game_id}")
        splits[split] = {"won": n_won, "games": n, "success": round(n_won / n, 4), "seconds":
                         round(time.perf_counter() - split_start, 2), "failed_games": failures,
                         "by_task": {task: {"won": won[task], "games": played[task]} for task in TASK_TYPES
                                     if played[task]}}
    wall = time.perf_counter() - start
    print(f"\nwall time {wall:.1f} s, {total_steps} steps ({total_steps / wall:.0f} steps/s incl. loads)")
    write_report(args.output, {"seed": args.seed, "max_steps": args.max_steps, "limit": args.limit,
                               "splits": splits, "steps": total_steps, "wall_seconds": round(wall, 2)})
    print(f"wrote {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
