"""Episodes in flight vs one at a time, against a loopback teacher that adds a fixed latency per call.

    python benchmarks/teacher_concurrency.py            # 64 episodes, 200 ms per call, 1 vs 32 in flight

Both runs play the same games with the same walkthrough-following responder over real HTTP (OpenAI SDK),
each into a fresh warehouse; the result is written to benchmarks/results/teacher_concurrency.json.
The teacher runs in its own process (``python -m evoharness.testing.serve``), as a remote API would, so
its CPU does not compete with the collector's event loop for the GIL. Times are whole ``collect()``
calls, environment pool start-up and warehouse writes included.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("ALFWORLD_DATA", str(Path(__file__).resolve().parents[1].parent / "shared" / "alfworld"))

import openai  # noqa: F401 - imported before timing, so neither run pays for it
from report import RESULTS, write_report

from evoharness.collection import CollectionConfig, CollectionResult, collect
from evoharness.teachers.registry import Provider, TeacherSpec
from evoharness.testing.teachers import write_registry
from warehouse import Warehouse

OUTPUT = RESULTS / "teacher_concurrency.json"


@contextmanager
def served_teacher(args: argparse.Namespace) -> Iterator[str]:
    """The walkthrough player with ``args.delay`` per call, served by a child process; yields its base URL."""
    command = [sys.executable, "-m", "evoharness.testing.serve", "--split", args.split, "--limit", str(args.episodes),
               "--delay", str(args.delay)]
    proc = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        line = proc.stdout.readline() if proc.stdout else ""
        if not line.startswith("PORT "):
            raise RuntimeError(f"the loopback teacher did not start (got {line!r})")
        yield f"http://127.0.0.1:{int(line.split()[1])}/v1"
    finally:
        if proc.stdin:
            proc.stdin.close()
        proc.wait(timeout=30)


def calls_served(db: Path) -> int:
    """Model calls made (one per turn: the benchmark injects no faults)."""
    with Warehouse(db) as warehouse:
        return int(warehouse.scalar("SELECT coalesce(sum(n_steps), 0) FROM episodes"))


def run_once(args: argparse.Namespace, concurrency: int, base_url: str, folder: Path) -> dict:
    spec = TeacherSpec(name="bench", provider=Provider.OPENAI_COMPATIBLE, model="loopback", base_url=base_url,
                       price_in=0.0, price_out=0.0, max_concurrency=max(concurrency, 1))
    registry = write_registry(folder / f"teachers-{concurrency}.yaml", spec)
    config = CollectionConfig(
        teacher="bench", split=args.split, limit=args.episodes, max_steps=args.max_steps, workers=args.workers,
        concurrency=concurrency, engine=args.engine, teachers_file=str(registry),
    )
    db = folder / f"bench-{concurrency}.duckdb"
    with Warehouse(db) as warehouse:
        started = time.perf_counter()
        result: CollectionResult = collect(config, warehouse, run_id=f"bench-{concurrency}")
        wall = time.perf_counter() - started
    calls = calls_served(db)
    return {
        "concurrency": result.concurrency, "episodes": len(result.records), "won": result.won,
        "failed": result.failed, "calls": calls, "seconds": round(wall, 2),
        "episodes_per_second": round(len(result.records) / wall, 3),
        "teacher_latency_floor_s": round(calls * args.delay / max(concurrency, 1), 2),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--episodes", type=int, default=64)
    parser.add_argument("--delay", type=float, default=0.2, help="Seconds the teacher adds to every call.")
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--engine", default="fast", help="fast (default) or textworld.")
    parser.add_argument("--max-steps", type=int, default=30)
    parser.add_argument("--workers", type=int, default=None,
                        help="Environment worker processes (default: by engine; in-process for fast).")
    parser.add_argument("--split", default="valid_seen")
    parser.add_argument("--output", type=Path, default=OUTPUT)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp, served_teacher(args) as base_url:
        sequential = run_once(args, 1, base_url, Path(tmp))
        concurrent = run_once(args, args.concurrency, base_url, Path(tmp))
    ratio = sequential["seconds"] / concurrent["seconds"]
    rows = [("", "sequential", f"{args.concurrency} in flight")] + [
        (key, str(sequential[key]), str(concurrent[key])) for key in sequential]
    for key, a, b in rows:
        print(f"{key:24} {a:>12} {b:>14}")
    print(f"{'speed-up':24} {'':>12} {ratio:>13.1f}x")
    report = {
        "benchmark": "teacher_concurrency", "episodes": args.episodes, "delay_s": args.delay, "engine": args.engine,
        "max_steps": args.max_steps, "workers": args.workers, "split": args.split,
        "sequential": sequential, "concurrent": concurrent, "speedup": round(ratio, 2),
    }
    write_report(args.output, report)
    print(f"wrote {args.output}")


if __name__ == "__main__":
    main()
