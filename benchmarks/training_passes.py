"""The training passes under two values of one of their operational settings, side by side in one run (issue #28):
SFT tokens/s and a GRPO step's scoring and loss passes, each arm the real trainer with the recipe's settings and only
that setting (in ``sft`` and ``grpo`` alike) set: the attention kernel, or the positions the fused LM head projects.

    OMP_NUM_THREADS=1 python benchmarks/training_passes.py --model SFT_MODEL --dataset DATASET \
        --setting attention --values sdpa eager --output benchmarks/results/attention_kernels.json
    OMP_NUM_THREADS=1 python benchmarks/training_passes.py --model SFT_MODEL --dataset DATASET \
        --setting scored_positions --values all labelled   # writes benchmarks/results/scored_positions.json

SFT: ``train_sft`` for ``--sft-steps`` steps in its own process per arm (one thread), non-padding input tokens per
second from its first logged training step to its last, as ``sft_buckets.py`` measures. GRPO: ``build_grpo_trainer`` from
``--model`` on recorded expert episodes rendered with the student's prompt set (``fixed_rollouts``), ``--grpo-steps``
steps per arm, the arm's scoring plus loss seconds. The arms alternate over ``--repeats`` (drift in the machine's
load hits both; each arm's best repeat counts) and train the same batches, so their last losses and final weights
differ by numerics only, which the report states. The precision is the recipe's (``bf16: auto``).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

os.environ.setdefault("OMP_NUM_THREADS", "1")

sys.path.insert(0, str(Path(__file__).resolve().parent))
from grpo_zero_advantage import train_arm
from report import RESULTS, command_line, write_report
from sft_buckets import arms_in_processes, timed_sft

SETTINGS = ("attention", "scored_positions")
"""The operational settings of the training passes this benchmark compares (fields of both SFTSettings and
GRPOSettings)."""


def sft_arm(dataset: str, recipe: str, setting: str, value: str, steps: int) -> dict[str, Any]:
    """The recipe's SFT for ``steps`` steps in this process with ``setting`` at ``value``."""
    settings, result, rate = timed_sft(dataset, recipe, steps, [f"sft.{setting}={value}"])
    return {"value": value, "bf16": settings.bf16, "steps": result.steps, "tokens_per_second": rate,
            "last_loss": result.train_loss}


def grpo_arm(model: str, settings: Any, setting: str, fixed: Any) -> dict[str, Any]:
    """``settings.max_steps`` GRPO steps on the recorded episodes: scoring and loss seconds, final weights."""
    run = train_arm(model, settings, fixed, every_turn=False)
    return {"value": getattr(settings, setting), "bf16": settings.bf16,
            "seconds": round(sum(run["scoring_seconds"]) + sum(run["train_seconds"]), 2),
            "turns": sum(run["turns"]), "last_loss": run["losses"][-1], "weights": run["weights"]}


def recorded_turns(model: str, games: int, group: int) -> Any:
    """The expert's episodes of the first ``games`` train games, ``group`` each (step budgets 70, 30, 15, 8 in turn),
    rendered with the student's prompt set and tokenizer: the same GRPO batches for every arm."""
    from transformers import AutoTokenizer

    from evoharness.envs.alfworld import GameCatalog
    from evoharness.training.fixed_rollouts import record_expert_rollouts

    game_ids = [g.game_id for g in GameCatalog().games("train", games)]
    return record_expert_rollouts(game_ids, AutoTokenizer.from_pretrained(model), group=group,
                                  budgets=(70, 30, 15, 8), prompt_tokens=1024, completion_tokens=64,
                                  prompt_set="alfworld/bpe_student")


def grpo_part(model: str, recipe: str, setting: str, values: list[str], games: int, steps: int,
              repeats: int) -> dict[str, Any]:
    """Both arms of the GRPO part in this process, alternating."""
    import torch

    from evoharness.training.recipes import load_recipe

    torch.set_num_threads(1)
    settings = load_recipe(recipe).grpo
    fixed = recorded_turns(model, games, settings.num_generations)
    base = settings.model_copy(update={"save_steps": None, "games_limit": games, "max_steps": steps,
                                       "guided_per_group": 0, "logging_steps": 1})
    runs: dict[str, list[dict[str, Any]]] = {v: [] for v in values}
    for _ in range(repeats):
        for value in values:
            runs[value].append(grpo_arm(model, base.model_copy(update={setting: value}), setting, fixed))
            print("grpo", {k: v for k, v in runs[value][-1].items() if k != "weights"}, flush=True)
    best = {k: min(rs, key=lambda r: r["seconds"]) for k, rs in runs.items()}
    first, second = values
    reference = best[first]["weights"]
    tokens = [len(t.prompt_ids) + len(t.completion_ids) for r in fixed.episodes.values() for t in r.turns]
    return {
        "games": games, "steps": steps, "recorded_turns": fixed.turns,
        "mean_tokens_per_turn": round(sum(tokens) / len(tokens), 1),
        "runs": {k: [{f: v for f, v in r.items() if f != "weights"} for r in rs] for k, rs in runs.items()},
        "best_seconds": {k: r["seconds"] for k, r in best.items()},
        f"ratio_{second}_over_{first}": round(best[first]["seconds"] / best[second]["seconds"], 2),
        "weights_relative_difference": float((best[second]["weights"] - reference).norm() / reference.norm()),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", required=True, help="a trained student's model folder (GRPO's start)")
    parser.add_argument("--dataset", required=True, help="a curated SFT dataset folder")
    parser.add_argument("--recipe", default="small")
    parser.add_argument("--sft-steps", type=int, default=40)
    parser.add_argument("--grpo-steps", type=int, default=2)
    parser.add_argument("--games", type=int, default=8, help="train games the expert plays for the GRPO part")
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--setting", choices=SETTINGS, required=True)
    parser.add_argument("--values", nargs=2, required=True, help="the setting's value before, then after")
    parser.add_argument("--output", type=Path, default=None, help="default: benchmarks/results/SETTING.json")
    parser.add_argument("--sft-arm", help=argparse.SUPPRESS)  # run one SFT arm, print its JSON
    args = parser.parse_args()
    if args.sft_arm is not None:
        print(json.dumps(sft_arm(args.dataset, args.recipe, args.setting, args.sft_arm, args.sft_steps)))
        return
    first, second = args.values
    sft_runs = arms_in_processes(__file__, ["--model", args.model, "--dataset", args.dataset, "--recipe", args.recipe,
                                            "--sft-steps", str(args.sft_steps), "--setting", args.setting,
                                            "--values", first, second],
                                 "--sft-arm", args.values, args.repeats)
    sft_best = {v: max(r["tokens_per_second"] for r in sft_runs if r["value"] == v) for v in args.values}
    output = args.output or RESULTS / f"{args.setting}.json"
    write_report(output, {
        "benchmark": "training_passes", "setting": args.setting,
        "command": f"OMP_NUM_THREADS={os.environ['OMP_NUM_THREADS']} {command_line()}",
        "sft": {"steps": args.sft_steps, "runs": sft_runs, "best_tokens_per_second": sft_best,
                f"ratio_{second}_over_{first}": round(sft_best[second] / sft_best[first], 2)},
        "grpo": grpo_part(args.model, args.recipe, args.setting, args.values, args.games, args.grpo_steps,
                          args.repeats),
        "note": "one process per arm, one thread; the arms alternate; the best repeat of each counts"})
    print(f"wrote {output}")


if __name__ == "__main__":
    main()
