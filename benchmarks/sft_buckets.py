"""The recipe's SFT with each batch padded to a multiple of N tokens against padding to its longest example, side by
side in one run: speed and memory of fewer distinct shapes (issue #28).

    OMP_NUM_THREADS=1 python benchmarks/sft_buckets.py --dataset DIR [--multiples 0 32 64] [--steps 150]
                                                        # writes benchmarks/results/sft_buckets.json

Where the CPU has bf16 units, torch runs bf16 matmuls as oneDNN primitives, one built per shape and kept in a cache
of 1,024 (``ONEDNN_PRIMITIVE_CACHE_CAPACITY``); length-grouped batches come in hundreds of widths, each with its own
projections forward and backward. Each arm is ``train_sft`` with the recipe's settings (``sft.pad_to_multiple_of``
set, 0 meaning unset) for ``--steps`` optimizer steps in its own process on one thread, so its peak resident memory
is its own; the arms alternate over ``--repeats``. Reported per arm: non-padding input tokens per second from its first
logged step to its last (set-up left out; the recipe's measure), peak resident memory, and the last logged loss (the
arms train the same batches, so the losses agree up to rounding).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

os.environ.setdefault("OMP_NUM_THREADS", "1")

sys.path.insert(0, str(Path(__file__).resolve().parent))
from report import command_line, this_checkout_env, write_report

RESULTS = Path(__file__).resolve().parent / "results" / "sft_buckets.json"


def timed_sft(dataset: str, recipe: str, steps: int, overrides: list[str]) -> tuple[Any, Any, float]:
    """The recipe's SFT with ``overrides`` for ``steps`` steps in this process on one thread: its settings, its
    result, and its non-padding input tokens per second from its first logged training step to its last (set-up, the
    first step and the final evaluation left out; the recipe's measure)."""
    import time

    import torch

    from evoharness.training.recipes import load_recipe
    from evoharness.training.sft import train_sft

    torch.set_num_threads(1)
    settings = load_recipe(recipe, [f"sft.max_steps={steps}", "sft.decision_turns=0", "sft.save_steps=100000",
                                    "sft.logging_steps=10", *overrides]).sft
    logged: list[tuple[float, dict[str, float]]] = []

    def on_log(logs: dict[str, float], step: int, max_steps: int) -> None:
        logged.append((time.perf_counter(), logs))

    with tempfile.TemporaryDirectory() as folder:
        result = train_sft(dataset, folder, settings, on_log=on_log)
    return settings, result, training_token_rate(logged)


def training_token_rate(logged: list[tuple[float, dict[str, float]]]) -> float:
    """Non-padding input tokens per second between the first and the last logged training step, from the trainer's
    logs with the time each came. Only training steps' logs count: the run's summary and the final evaluation
    (``train_sft`` evaluates the finished model) log the same token count later, and counting up to them would time
    the evaluation too."""
    steps = [(at, logs["num_input_tokens_seen"]) for at, logs in logged
             if "loss" in logs and "num_input_tokens_seen" in logs]
    (t0, n0), (t1, n1) = steps[0], steps[-1]
    return round((n1 - n0) / (t1 - t0), 1)


def arm(dataset: str, recipe: str, multiple: int, steps: int) -> dict[str, Any]:
    """One arm in this process: the recipe's SFT for ``steps`` steps, batches padded to ``multiple`` (0: none)."""
    settings, result, rate = timed_sft(dataset, recipe, steps,
                                       [f"sft.pad_to_multiple_of={multiple}"] if multiple else [])
    return {"multiple": multiple, "bf16": settings.bf16, "steps": result.steps, "seconds": round(result.seconds, 1),
            "tokens_per_second": rate, "last_loss": result.train_loss,
            "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)}


def arms_in_processes(script: str, args: list[str], flag: str, arms: list[str], repeats: int) -> list[dict[str, Any]]:
    """``script args flag ARM`` for every arm, ``repeats`` times in turn, each in its own process (so its memory and
    threads are its own); each prints its result as JSON on its last line."""
    runs: list[dict[str, Any]] = []
    for repeat in range(repeats):
        for arm_value in arms:
            done = subprocess.run([sys.executable, script, *args, flag, arm_value], check=True, capture_output=True,
                                  text=True, env=os.environ | this_checkout_env())
            runs.append(json.loads(done.stdout.strip().splitlines()[-1]) | {"repeat": repeat})
            print(runs[-1], flush=True)
    return runs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dataset", required=True, help="a curated SFT dataset folder")
    parser.add_argument("--recipe", default="small")
    parser.add_argument("--multiples", type=int, nargs="+", default=[0, 32, 64], help="0: pad to the longest")
    parser.add_argument("--steps", type=int, default=150)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--output", type=Path, default=RESULTS)
    parser.add_argument("--arm", type=int, default=None, help=argparse.SUPPRESS)  # run one arm, print its JSON
    args = parser.parse_args()
    if args.arm is not None:
        print(json.dumps(arm(args.dataset, args.recipe, args.arm, args.steps)))
        return
    runs = arms_in_processes(__file__, ["--dataset", args.dataset, "--recipe", args.recipe, "--steps",
                                        str(args.steps)], "--arm", [str(m) for m in args.multiples], args.repeats)
    best = {m: max(r["tokens_per_second"] for r in runs if r["multiple"] == m) for m in args.multiples}
    baseline = best[args.multiples[0]]
    write_report(args.output, {
        "benchmark": "sft_buckets", "command": f"OMP_NUM_THREADS={os.environ['OMP_NUM_THREADS']} {command_line()}",
        "runs": runs, "best_tokens_per_second": best,
        "ratio_to_first": {m: round(rate / baseline, 3) for m, rate in best.items()},
        "peak_rss_mb": {m: max(r["peak_rss_mb"] for r in runs if r["multiple"] == m) for m in args.multiples}})
    print(f"wrote {args.output}")


if __name__ == "__main__":
    main()
