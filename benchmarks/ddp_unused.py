"""SFT of the ``small`` student in two processes with DDP's search for unused parameters on (transformers' rule when
gradient checkpointing is off, as in the recipe) and off (``sft.ddp_find_unused_parameters: false``), side by side
in one run, the arms alternating (issue #28: the process layout chosen by measurement).

    OMP_NUM_THREADS=1 python benchmarks/ddp_unused.py --dataset DATASET_DIR [--steps 120] [--repeats 2]

Each run trains the recipe's SFT for ``--steps`` optimizer steps from the same built student under ``accelerate
launch`` (two processes, gloo). Writes ``benchmarks/results/ddp_unused.json``: per arm each run's training seconds
and input tokens/s, the ratio of the arms' medians, and each arm's logged losses (the flag changes no arithmetic:
the losses must agree up to the rounding of a different reduction order).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")
sys.path.insert(0, str(Path(__file__).resolve().parent))
from report import RESULTS, accelerate_launch, command_line, write_report

ARMS = {"search": None, "no_search": False}
"""An arm by name: its ``ddp_find_unused_parameters`` (None: transformers' rule, which searches here)."""


def worker(dataset: str, out: Path, arm: str, steps: int) -> None:
    """One process of one arm's SFT run; the main process writes its seconds, tokens and losses."""
    from evoharness.training.recipes import DEFAULT_RECIPE, load_recipe
    from evoharness.training.sft import train_sft

    settings = load_recipe(DEFAULT_RECIPE).sft.model_copy(update={
        "max_steps": steps, "save_steps": 100_000, "decision_turns": 0, "logging_steps": 10,
        "ddp_find_unused_parameters": ARMS[arm]})
    result = train_sft(dataset, out, settings)
    if int(os.environ.get("RANK", "0")) == 0:
        (out / "run.json").write_text(json.dumps({
            "seconds": round(result.seconds, 2), "tokens": result.tokens_seen, "steps": result.steps,
            "tokens_per_second": round((result.tokens_seen or 0) / result.seconds, 1),
            "losses": result.loss_history, "bf16": settings.bf16}))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dataset", required=True, help="a curated SFT dataset folder")
    parser.add_argument("--steps", type=int, default=120)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--worker", choices=list(ARMS), help=argparse.SUPPRESS)
    parser.add_argument("--out", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(args.dataset, args.out, args.worker, args.steps)
        return
    runs: dict[str, list[dict]] = {arm: [] for arm in ARMS}
    with tempfile.TemporaryDirectory() as tmp:
        for repeat in range(args.repeats):
            for arm in ARMS:
                out = Path(tmp) / f"{arm}-{repeat}"
                accelerate_launch(Path(__file__).resolve(), ["--dataset", args.dataset, "--steps", str(args.steps),
                                                             "--worker", arm, "--out", str(out)],
                                  processes=2, port=29610, timeout_s=3600)
                runs[arm].append(json.loads((out / "run.json").read_text()))
                print(arm, repeat, runs[arm][-1]["tokens_per_second"], "tokens/s", flush=True)
    rate = {arm: statistics.median(r["tokens_per_second"] for r in arm_runs) for arm, arm_runs in runs.items()}
    losses = {arm: arm_runs[0]["losses"] for arm, arm_runs in runs.items()}
    gap = max(abs(a[1] - b[1]) for a, b in zip(losses["search"], losses["no_search"], strict=True))
    result = {"steps": args.steps, "repeats": args.repeats, "runs": runs, "tokens_per_second_median": rate,
              "ratio_no_search_over_search": round(rate["no_search"] / rate["search"], 3),
              "largest_loss_gap": gap, "note": "two processes under accelerate launch (gloo) on 2 cores; arms "
                                               "alternate within the run"}
    write_report(RESULTS / "ddp_unused.json", result, command=command_line().replace(args.dataset, "DATASET"))
    print(result["tokens_per_second_median"], result["ratio_no_search_over_search"], "loss gap", gap)


if __name__ == "__main__":
    main()
