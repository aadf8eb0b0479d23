"""Expert collection throughput: episodes per second with 1 and 2 environment workers, per engine.

Runs the same expert collection (bpe mode, the first N valid_seen games) into a fresh temporary warehouse
for each (engine, workers) pair — plus in-process stepping (0 workers) for the fast engine — prints
episodes/s side by side with the 2-worker / 1-worker ratio, and writes
``benchmarks/results/collection_throughput.json``.

    python benchmarks/collection_throughput.py [--games 12] [--engines textworld fast]
"""

from __future__ import annotations

import argparse
import os
import tempfile
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")
REPO = Path(__file__).resolve().parents[1]
os.environ.setdefault("ALFWORLD_DATA", str(REPO.parent / "shared" / "alfworld"))

from report import RESULTS, write_report

from evoharness.collection import CollectionConfig, collect
from warehouse import Warehouse


def measure(engine: str, workers: int, games: int) -> dict:
    config = CollectionConfig(teacher="expert", split="valid_seen", limit=games, workers=workers,
                              concurrency=8, engine=engine)
    with tempfile.TemporaryDirectory() as tmp, Warehouse(Path(tmp) / "bench.duckdb") as wh:
        result = collect(config, wh, run_id=f"bench-{engine}-{workers}")
    return {"engine": engine, "workers": workers, "episodes": len(result.records), "won": result.won,
            "seconds": round(result.seconds, 2), "episodes_per_second": round(result.episodes_per_second or 0, 3)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--games", type=int, default=12)
    parser.add_argument("--engines", nargs="+", default=["textworld", "fast"])
    args = parser.parse_args()
    rows = [measure(engine, workers, args.games) for engine in args.engines
            for workers in ((0, 1, 2) if engine == "fast" else (1, 2))]
    print(f"{'engine':<10} {'workers':>7} {'episodes':>8} {'won':>4} {'seconds':>8} {'episodes/s':>10}")
    for row in rows:
        print(f"{row['engine']:<10} {row['workers']:>7} {row['episodes']:>8} {row['won']:>4} "
              f"{row['seconds']:>8} {row['episodes_per_second']:>10}")
    ratios = {}
    for engine in args.engines:
        one, two = (next(r for r in rows if r["engine"] == engine and r["workers"] == w) for w in (1, 2))
        ratios[engine] = round(two["episodes_per_second"] / one["episodes_per_second"], 2)
        print(f"{engine}: 2 workers / 1 worker = {ratios[engine]}x")
    if "textworld" in ratios and "fast" in ratios:
        fast2 = next(r for r in rows if r["engine"] == "fast" and r["workers"] == 2)
        real2 = next(r for r in rows if r["engine"] == "textworld" and r["workers"] == 2)
        fast0 = next(r for r in rows if r["engine"] == "fast" and r["workers"] == 0)
        ratios["fast_vs_textworld_2_workers"] = round(fast2["episodes_per_second"] / real2["episodes_per_second"], 1)
        ratios["fast_in_process_vs_textworld_2_workers"] = round(
            fast0["episodes_per_second"] / real2["episodes_per_second"], 1)
        print(f"fast / textworld (2 workers each) = {ratios['fast_vs_textworld_2_workers']}x; "
              f"fast in-process / textworld 2 workers = {ratios['fast_in_process_vs_textworld_2_workers']}x")
    out = RESULTS / "collection_throughput.json"
    write_report(out, {"games": args.games, "runs": rows, "ratios": ratios})
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
