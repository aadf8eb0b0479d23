"""What a student costs on a CPU, side by side in one run, with the same small (3.4M) student: the path as it was
before issue #9 (teacher rendering, random batches, unconstrained decoding, 4 episodes in flight, fp32 with
activation recomputation), the compact path of the first #9 sessions (compact student rendering, length-grouped
batches, constrained decoding, 16 in flight), and today's (the student rendering, bf16 training passes, no
activation recomputation).

    ALFWORLD_DATA=../shared/alfworld python benchmarks/student_speed.py --dataset PATH   # a curated dataset

Prints SFT tokens/s (non-padding input tokens), evaluation turns/s and GRPO seconds per step for both paths,
and writes benchmarks/results/student_speed.json. The student is randomly initialised: speed, not skill.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import platform
import tempfile
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("OMP_NUM_THREADS", "1")

from evoharness.collection import CollectionConfig, collect
from evoharness.envs.alfworld import SEED_BANK
from evoharness.harness.experience import load_bank_file
from evoharness.teachers.registry import Provider, TeacherRegistry, TeacherSpec
from evoharness.training.grpo import GRPOSettings, train_grpo
from evoharness.training.sft import SFTSettings, train_sft
from evoharness.training.student_card import write_student_card
from warehouse import Warehouse

RESULTS = Path(__file__).resolve().parent / "results" / "student_speed.json"
SLOW = {"bf16": False, "gradient_checkpointing": True}
PATHS: dict[str, dict[str, Any]] = {
    "before": {"prompt_set": None, "group_by_length": False, "constrain": False, "in_flight": 4, **SLOW},
    "compact": {"prompt_set": "alfworld/bpe_compact", "group_by_length": True, "constrain": True, "in_flight": 16,
                **SLOW},
    "today": {"prompt_set": "alfworld/bpe_student", "group_by_length": True, "constrain": True, "in_flight": 16,
              "bf16": True, "gradient_checkpointing": False},
}


def sft_speed(dataset: str, path: dict[str, Any], steps: int, folder: Path) -> tuple[dict[str, float], str]:
    settings = SFTSettings.local_student("small", prompt_set=path["prompt_set"],
                                         group_by_length=path["group_by_length"], max_steps=steps,
                                         bf16=path["bf16"], gradient_checkpointing=path["gradient_checkpointing"],
                                         decision_turns=0, save_steps=10_000, logging_steps=steps)
    result = train_sft(dataset, folder, settings)
    write_student_card(result.model_dir, path["prompt_set"], {"settings": settings.model_dump(mode="json")})
    return {"sft_steps": result.steps, "sft_seconds": round(result.seconds, 1),
            "sft_tokens_per_second": round((result.tokens_seen or 0) / result.seconds, 1)}, result.model_dir


def evaluation_speed(model: str, path: dict[str, Any], episodes: int, steps: int, folder: Path) -> dict[str, float]:
    spec = TeacherSpec(name="student", provider=Provider.LOCAL_HF, model=model, price_in=0.0, price_out=0.0,
                       max_concurrency=path["in_flight"], max_tokens=96, distill_games=None,
                       prompt_template=path["prompt_set"] or "alfworld/{mode}", constrain_actions=path["constrain"])
    config = CollectionConfig(teacher="student", split="valid_seen", limit=episodes, max_steps=steps,
                              concurrency=path["in_flight"], engine="fast")
    with Warehouse(folder / "eval.duckdb") as wh:
        started = time.perf_counter()
        collect(config, wh, "speed", registry=TeacherRegistry([spec]))
        wall = time.perf_counter() - started
        turns, tokens, invalid = wh.con.execute(
            "SELECT count(*), sum(output_tokens), count(*) FILTER (kind = 'invalid') FROM steps").fetchone()
    return {"eval_turns": turns, "eval_seconds": round(wall, 1), "eval_turns_per_second": round(turns / wall, 2),
            "eval_tokens_per_turn": round(tokens / turns, 1), "eval_invalid_share": round(invalid / turns, 3)}


def grpo_speed(model: str, path: dict[str, Any], folder: Path) -> dict[str, float]:
    settings = GRPOSettings.local_student(games_limit=2, games_per_step=2, num_generations=2, max_steps=1,
                                          episode_steps=10, bf16=path["bf16"],
                                          gradient_checkpointing=path["gradient_checkpointing"])
    result = train_grpo(model, folder, settings, bank=load_bank_file(SEED_BANK), engine="fast")
    return {"grpo_seconds_per_step": round(result.seconds / max(1, result.steps), 1)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dataset", required=True, help="A curated SFT dataset folder (evoharness curate).")
    parser.add_argument("--sft-steps", type=int, default=8)
    parser.add_argument("--episodes", type=int, default=16)
    parser.add_argument("--max-steps", type=int, default=8)
    parser.add_argument("--output", type=Path, default=RESULTS)
    args = parser.parse_args()
    logging.getLogger("evoharness.teachers.llm").setLevel(logging.ERROR)
    measured: dict[str, dict[str, float]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for name, path in PATHS.items():
            folder = Path(tmp) / name
            sft, model = sft_speed(args.dataset, path, args.sft_steps, folder / "sft")
            measured[name] = sft | evaluation_speed(model, path, args.episodes, args.max_steps, folder) \
                | grpo_speed(model, path, folder / "grpo")
            print(name, measured[name], flush=True)
    names = list(PATHS)
    print(f"\n{'':26}" + "".join(f"{n:>10}" for n in names) + f"{'today/before':>14}{'today/compact':>15}")
    for key in measured["before"]:
        values = [measured[n][key] for n in names]
        ratios = [f"{measured['today'][key] / measured[n][key]:.2f}x" if measured[n][key] else "-"
                  for n in ("before", "compact")]
        print(f"{key:26}" + "".join(f"{v!s:>10}" for v in values) + f"{ratios[0]:>14}{ratios[1]:>15}")
    report = {"benchmark": "student_speed", "command": "python benchmarks/student_speed.py --dataset DATASET",
              "dataset": args.dataset, "paths": PATHS, "measured": measured,
              "machine": {"cpus": os.cpu_count(), "python": platform.python_version()}}
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(report, indent=2) + "\n")
    print(f"wrote {args.output}")


if __name__ == "__main__":
    main()
