"""Evaluation in one process against several (``EvaluationConfig.processes``), side by side on the same games.

    OMP_NUM_THREADS=1 ALFWORLD_DATA=../shared/alfworld python benchmarks/eval_processes.py \\
        --db WAREHOUSE --model-version V [--split train --limit 60 --processes 1 2 --repeats 1]

Each setting plays the version greedily on the split's first ``--limit`` games into its own copy of the warehouse
(so none resumes from another), the settings alternating ``--repeats`` times; the split must be one the version has
not played (a GRPO version has not played train). Reports wall seconds, turns per
second and whether every game ended the same way in the same number of steps (greedy play in another batch
composition: only float order differs). Writes ``benchmarks/results/eval_processes.json``.
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

import report

from evoharness.evaluation.run import EvaluationConfig, evaluate
from warehouse import Warehouse


def play(db: Path, config: EvaluationConfig) -> tuple[float, dict[str, tuple[bool, int]]]:
    """Wall seconds, and each game's (won, steps)."""
    with Warehouse(db) as wh:
        started = time.perf_counter()
        result = evaluate(wh, config, f"eval-processes-{config.processes}")
        seconds = time.perf_counter() - started
    skipped = sum(split.skipped for split in result.by_split.values())
    if skipped:
        raise SystemExit(f"{config.model_version} already played {skipped} of these games: pick a split it has not "
                         "played")
    records = [r for split in result.by_split.values() for r in split.records]
    return seconds, {r.spec.game.game_id: (r.won, len(r.steps)) for r in records}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--db", type=Path, required=True, help="a warehouse holding the model version")
    parser.add_argument("--model-version", required=True)
    parser.add_argument("--split", default="train")
    parser.add_argument("--limit", type=int, default=60)
    parser.add_argument("--processes", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--repeats", type=int, default=1)
    args = parser.parse_args()
    runs: dict[int, list[dict[str, Any]]] = {n: [] for n in args.processes}
    outcomes: dict[int, dict[str, tuple[bool, int]]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        source = Path(tmp) / "source.duckdb"
        shutil.copy(args.db, source)  # one snapshot, so every copy starts alike
        for repeat in range(args.repeats):
            for n in args.processes:
                db = Path(tmp) / f"{n}-{repeat}.duckdb"
                shutil.copy(source, db)
                config = EvaluationConfig(model_version=args.model_version, splits=(args.split,), limit=args.limit,
                                          processes=n)
                seconds, games = play(db, config)
                turns = sum(steps for _, steps in games.values())
                runs[n].append({"seconds": round(seconds, 1), "turns": turns,
                                "turns_per_second": round(turns / seconds, 2), "won": sum(w for w, _ in games.values())})
                outcomes.setdefault(n, games)
                print(n, runs[n][-1], flush=True)
    base = args.processes[0]
    same = {str(n): sum(outcomes[n].get(g) == o for g, o in outcomes[base].items()) for n in args.processes}
    best = {n: min(r["seconds"] for r in rs) for n, rs in runs.items()}
    result = {"model_version": args.model_version, "split": args.split, "games": len(outcomes[base]),
              "runs": {str(n): rs for n, rs in runs.items()},
              "speedup_over_first": {str(n): round(best[base] / best[n], 2) for n in args.processes},
              "games_ending_alike": same,
              "note": "OMP_NUM_THREADS as set by the caller; each process gets cores // processes threads"}
    report.write_report(report.RESULTS / "eval_processes.json", result, command=report.command_line()
                        .replace(str(args.db), "WAREHOUSE"))
    print(result)


if __name__ == "__main__":
    main()
