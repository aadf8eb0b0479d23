"""A local student playing evaluation episodes: one at a time vs many in flight with batched generation.

    python benchmarks/student_batching.py               # 16 valid_seen episodes of 10 steps, 1 vs 16 in flight

The student is a tiny Qwen3 built here (random weights, the real tokenizer path and Qwen3 chat template); it
plays through the same runner, harness and local client as any evaluated model version, each run into a fresh
warehouse. With one episode in flight every turn is its own ``generate``; with many, the turns that are
waiting run as one left-padded batch. Writes benchmarks/results/student_batching.json.
"""

from __future__ import annotations

import argparse
import logging
import os
import tempfile
import time
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("ALFWORLD_DATA", str(Path(__file__).resolve().parents[1].parent / "shared" / "alfworld"))

import transformers  # noqa: F401 - imported before timing, so neither run pays for it
from report import RESULTS, write_report

from evoharness.collection import CollectionConfig, collect
from evoharness.teachers.registry import Provider, TeacherSpec
from evoharness.testing.teachers import write_registry
from evoharness.testing.tiny_hf import build_tiny_qwen3
from warehouse import Warehouse

OUTPUT = RESULTS / "student_batching.json"


def run_once(args: argparse.Namespace, concurrency: int, model: Path, folder: Path) -> dict:
    spec = TeacherSpec(name="student", provider=Provider.LOCAL_HF, model=str(model), price_in=0.0, price_out=0.0,
                       max_concurrency=concurrency, max_tokens=args.max_tokens)
    registry = write_registry(folder / f"teachers-{concurrency}.yaml", spec)
    config = CollectionConfig(teacher="student", split="valid_seen", limit=args.episodes, max_steps=args.max_steps,
                              concurrency=concurrency, engine="fast", teachers_file=str(registry))
    with Warehouse(folder / f"bench-{concurrency}.duckdb") as warehouse:
        started = time.perf_counter()
        result = collect(config, warehouse, run_id=f"bench-{concurrency}")
        wall = time.perf_counter() - started
        row = warehouse.con.execute("SELECT count(*), sum(output_tokens) FROM steps").fetchone()
    assert row is not None
    turns, tokens = row
    return {"in_flight": concurrency, "episodes": len(result.records), "turns": turns, "generated_tokens": tokens,
            "seconds": round(wall, 2), "turns_per_second": round(turns / wall, 2),
            "tokens_per_second": round(tokens / wall, 1)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--episodes", type=int, default=16)
    parser.add_argument("--max-steps", type=int, default=10)
    parser.add_argument("--max-tokens", type=int, default=48, help="Completion tokens per turn.")
    parser.add_argument("--output", type=Path, default=OUTPUT)
    args = parser.parse_args()
    logging.getLogger("evoharness.teachers.llm").setLevel(logging.ERROR)  # a random student's empty turns
    with tempfile.TemporaryDirectory() as tmp:
        model = build_tiny_qwen3(Path(tmp) / "student", vocab_size=2048)
        one = run_once(args, 1, model, Path(tmp))
        many = run_once(args, args.episodes, model, Path(tmp))
    ratio = one["seconds"] / many["seconds"]
    print(f"{'':20} {'1 in flight':>12} {str(args.episodes) + ' in flight':>14}")
    for key in one:
        print(f"{key:20} {one[key]!s:>12} {many[key]!s:>14}")
    print(f"{'speed-up':20} {'':>12} {ratio:>13.1f}x")
    report = {"benchmark": "student_batching", "episodes": args.episodes, "max_steps": args.max_steps,
              "max_tokens": args.max_tokens, "one_at_a_time": one, "batched": many, "speedup": round(ratio, 2)}
    write_report(args.output, report)
    print(f"wrote {args.output}")


if __name__ == "__main__":
    main()
