"""The data half at scale: the expert on the 900 train games with enough seeds for >= 50,000 episodes, then
consolidation and curation of everything it wrote; episodes/s per stage.

Collection and consolidation have one path each (the library's, in chunks so that memory stays bounded);
curation runs the reference path (``curation_reference.py``: per-episode Python loops, every pair of a game
compared for near-duplicates; ``today`` in the report) beside the library's columnar one (DuckDB SQL + polars,
MinHash LSH near-duplicates) on the same candidates, and checks that both choose the same episodes. Every phase resumes: a rerun skips stored episodes and
consolidated episodes, and a phase with nothing left to run keeps the measurement of the invocation
that ran it (``--phases`` picks some).

    nohup nice -n 15 python benchmarks/data_scale.py > /tmp/data_scale.log 2>&1 &
    python benchmarks/data_scale.py --games 60 --seeds 4 --db /tmp/small.duckdb   # a quick look

Writes ``benchmarks/results/data_scale.json`` (with the command that made it).
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("OMP_NUM_THREADS", "1")
REPO = Path(__file__).resolve().parents[1]
os.environ.setdefault("ALFWORLD_DATA", str(REPO.parent / "shared" / "alfworld"))

from curation_reference import curate_reference
from report import RESULTS, command_line, write_report

from evoharness.collection import CollectionConfig, collect
from evoharness.consolidation.config import ConsolidationConfig
from evoharness.consolidation.pipeline import consolidate
from evoharness.consolidation.rules import RuleConsolidator
from evoharness.consolidation.source import source_rows
from evoharness.curation.build import curate
from evoharness.curation.config import CurationConfig
from warehouse import Warehouse

OUTPUT = RESULTS / "data_scale.json"


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", flush=True)


def phase_collect(db: Path, games: int, seeds: int, chunk_games: int) -> dict[str, Any]:
    """Expert, bpe mode, fast engine in-process, ``games`` train games × ``seeds`` seeds, in chunks of games."""
    ran = written = won = 0
    seconds = 0.0
    for start in range(0, games, chunk_games):
        config = CollectionConfig(split="train", limit=min(start + chunk_games, games), seeds=tuple(range(seeds)),
                                  workers=0, engine="fast")
        with Warehouse(db) as wh:
            result = collect(config, wh, run_id=f"data-scale-collect-{start}")
        ran, written, won, seconds = (ran + len(result.records), written + result.written, won + result.won,
                                      seconds + result.seconds)
        log(f"collect: games < {min(start + chunk_games, games)}: ran {len(result.records)} "
            f"({result.skipped} already stored) in {result.seconds:.1f}s")
        del result
    with Warehouse(db, read_only=True) as wh:
        stored = int(wh.scalar("SELECT count(*) FROM episodes WHERE teacher = 'expert' AND split = 'train'"))
    return {"episodes_stored": stored, "episodes_run": ran, "won": won, "seconds": round(seconds, 1),
            "episodes_per_second": round(ran / seconds, 2) if ran and seconds else None}


def phase_consolidate(db: Path, chunk: int, follow: int | None = None) -> dict[str, Any]:
    """Rule consolidation of every stored train episode, at most ``chunk`` episodes per run (memory stays
    bounded): each run takes the first ``window`` episodes in game order (consolidation's ``limit``) and the
    window grows by ``chunk`` per run. With ``follow``, it runs beside a collection: when it has caught up it
    waits (not timed) for more episodes until ``follow`` are consolidated or nothing new arrives for 10 minutes."""
    done = seconds = 0.0
    runs = idle = 0
    window = chunk
    while True:
        config = ConsolidationConfig(engine="fast", workers=0, limit=window, batch_size=500)
        with Warehouse(db, read_only=True) as wh:
            stored = len(source_rows(wh, config.teacher, config.splits, config.modes))
        result = consolidate(config, db, RuleConsolidator(), f"data-scale-consolidate-{runs}")
        if window < stored:
            window += chunk
        if result.planned == 0:
            if window < stored:
                continue
            if follow is None or done >= follow or idle >= 20:
                break
            idle += 1
            time.sleep(30)
            continue
        idle = 0
        runs += 1
        done += result.planned
        seconds += result.seconds
        log(f"consolidate: run {runs}: {result.planned} episodes ({result.failed} failed) in {result.seconds:.1f}s; "
            f"{int(done)} so far at {done / seconds:.1f} episodes/s")
    with Warehouse(db, read_only=True) as wh:
        total = int(wh.scalar("SELECT count(*) FROM consolidated_episodes WHERE status = 'ok'"))
    return {"episodes_consolidated": total, "episodes_run": int(done), "runs": runs, "seconds": round(seconds, 1),
            "episodes_per_second": round(done / seconds, 2) if done and seconds else None}


def phase_curate(db: Path, out_dir: Path) -> dict[str, Any]:
    """The reference curation (Python loops) and the library's columnar one on the same warehouse; the same
    episodes must be chosen."""
    rows: dict[str, Any] = {}
    with Warehouse(db) as wh:
        candidates = int(wh.scalar("SELECT count(*) FROM consolidated_episodes WHERE status = 'ok'"))
        for name, build in (("today", curate_reference), ("columnar", curate)):
            config = CurationConfig(name=f"scale-{name}", output_dir=str(out_dir))
            started = time.perf_counter()
            result = build(wh, config, f"data-scale-curate-{name}")
            seconds = time.perf_counter() - started
            chosen = sorted(r[0] for r in wh.con.execute(
                "SELECT DISTINCT episode_id FROM dataset_examples WHERE dataset_id = ?", [result.dataset_id]
            ).fetchall())
            rows[name] = {"dataset_id": result.dataset_id, "seconds": round(seconds, 2),
                          "episodes_per_second": round(candidates / seconds, 1), "n_train": result.n_train,
                          "n_validation": result.n_validation, "dropped": result.dropped, "episodes": chosen}
            log(f"curate ({name}): {candidates} candidates in {seconds:.1f}s, dropped {result.dropped}")
    same = rows["today"]["episodes"] == rows["columnar"]["episodes"]
    for row in rows.values():
        row["episodes_chosen"] = len(row.pop("episodes"))
    return {"candidates": candidates, "today": rows["today"], "columnar": rows["columnar"],
            "same_episodes_chosen": same,
            "speedup": round(rows["today"]["seconds"] / rows["columnar"]["seconds"], 2)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--db", type=Path, default=Path("/tmp/evoharness_data_scale/warehouse.duckdb"))
    parser.add_argument("--games", type=int, default=900)
    parser.add_argument("--seeds", type=int, default=56, help="900 × 56 = 50,400 episodes")
    parser.add_argument("--chunk-games", type=int, default=100)
    parser.add_argument("--consolidate-chunk", type=int, default=2500)
    parser.add_argument("--phases", nargs="+", default=["collect", "consolidate", "curate"])
    parser.add_argument("--follow", type=int, default=None, help="consolidate beside a running collection until "
                        "this many episodes are consolidated")
    parser.add_argument("--out", type=Path, default=OUTPUT)
    args = parser.parse_args()
    args.db.parent.mkdir(parents=True, exist_ok=True)
    report: dict[str, Any] = json.loads(args.out.read_text()) if args.out.exists() else {}
    report["runs"] = [*report.get("runs", [report["command"]] if "command" in report else []), command_line()]
    report.pop("cpus", None)  # reports written before benchmarks/report.py kept it beside a platform string
    report |= {"command": " && ".join(report["runs"]), "games": args.games, "seeds": args.seeds,
               "planned_episodes": args.games * args.seeds}
    phases = {"collect": lambda: phase_collect(args.db, args.games, args.seeds, args.chunk_games),
              "consolidate": lambda: phase_consolidate(args.db, args.consolidate_chunk, args.follow),
              "curate": lambda: phase_curate(args.db, args.db.parent / "datasets")}
    for name in args.phases:
        log(f"phase {name}")
        measured = phases[name]()
        if measured.get("episodes_run") == 0 and name in report:
            log(f"{name}: nothing left to run; keeping the measurement of the run that did it")
        else:
            report[name] = measured
        write_report(args.out, report)
    print(f"\n{'stage':<12} {'episodes':>9} {'seconds':>9} {'episodes/s':>11}   the reference loops beside it")
    for name in ("collect", "consolidate"):
        if name in report:
            row = report[name]
            print(f"{name:<12} {row['episodes_run']:>9} {row['seconds']:>9} {row['episodes_per_second']!s:>11}   "
                  "(one path)")
    if "curate" in report:
        row = report["curate"]
        print(f"{'curate':<12} {row['candidates']:>9} {row['columnar']['seconds']:>9} "
              f"{row['columnar']['episodes_per_second']:>11}   reference {row['today']['seconds']} s "
              f"({row['today']['episodes_per_second']}/s): {row['speedup']}x; same episodes chosen: "
              f"{row['same_episodes_chosen']}")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
