"""GRPO steps with the KL term (the recipe's β), with β = 0 training every turn, and with β = 0 skipping the turns
whose advantage is 0 (``EpisodeGRPOTrainer.zero_advantage_trains_nothing``), side by side in one run on the same
recorded episodes.

The episodes are real: the ALFWorld expert plays ``--games`` train games ``--group`` times with step budgets
70/30/15/8 (``fixed_rollouts``); the last ``--guided`` members of each group are marked guided, as the recipe's
guided GRPO marks the episodes it decodes without repeats, so their losses get advantage 0 (``guided_wins_only``).
Every arm trains ``--steps`` optimizer steps from the same model through ``trainer.train()``, ``--repeats`` times
in turn (so drift in the machine's load hits every arm; each arm's fastest repeat counts); the two β = 0 arms must
end with the same weights (numerics only). Writes ``benchmarks/results/grpo_zero_advantage.json``.

    OMP_NUM_THREADS=1 python benchmarks/grpo_zero_advantage.py --model MODEL_DIR
"""

from __future__ import annotations

import argparse
import dataclasses
import tempfile
import time
from typing import Any

import report
import torch

from evoharness.envs.alfworld import GameCatalog
from evoharness.training.fixed_rollouts import FixedRollouts, record_expert_rollouts
from evoharness.training.grpo import build_grpo_trainer
from evoharness.training.grpo_config import GRPOSettings
from evoharness.training.grpo_trainer import EpisodeGRPOTrainer
from evoharness.training.recipes import DEFAULT_RECIPE, load_recipe


class EveryTurnTrainer(EpisodeGRPOTrainer):
    """The trainer as it was before the skip: every turn is trained, whatever its advantage."""

    @property
    def zero_advantage_trains_nothing(self) -> bool:
        return False


def with_guided_members(fixed: FixedRollouts, guided: int) -> FixedRollouts:
    """``fixed`` with its last ``guided`` members of every group marked guided."""
    marked = {key: dataclasses.replace(r, guided=key[1] >= fixed.group - guided) for key, r in fixed.episodes.items()}
    return FixedRollouts(marked, fixed.group)


def train_arm(model: str, settings: GRPOSettings, fixed: FixedRollouts, every_turn: bool) -> dict[str, Any]:
    """``settings.max_steps`` steps on ``fixed``; their per-step timings, turn counts and the final weights."""
    with tempfile.TemporaryDirectory() as folder:
        trainer = build_grpo_trainer(model, folder, settings, fixed)
        if every_turn:
            trainer.__class__ = EveryTurnTrainer
        started = time.perf_counter()
        trainer.train()
        seconds = time.perf_counter() - started
    logs = [entry for entry in trainer.state.log_history if "time/train_seconds" in entry]

    def per_step(key: str) -> list[float]:
        return [round(float(entry[key]), 2) for entry in logs]

    return {"skips": trainer.zero_advantage_trains_nothing, "seconds": round(seconds, 2),
            "scoring_seconds": per_step("time/scoring_seconds"), "train_seconds": per_step("time/train_seconds"),
            "turns": per_step("samples/turns"), "turns_trained": per_step("samples/turns_trained"),
            "losses": [float(entry["loss"]) for entry in logs],
            "weights": torch.cat([p.detach().flatten().float() for p in trainer.model.parameters()])}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", required=True, help="a trained student's model folder")
    parser.add_argument("--recipe", default=DEFAULT_RECIPE, help="its GRPO settings (micro-batch, loss, β, guided)")
    parser.add_argument("--games", type=int, default=8, help="train games (games_per_step of them per step)")
    parser.add_argument("--group", type=int, default=4)
    parser.add_argument("--guided", type=int, default=2, help="members of each group marked guided")
    parser.add_argument("--steps", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=2)
    args = parser.parse_args()
    from transformers import AutoTokenizer

    games = [g.game_id for g in GameCatalog().games("train", args.games)]
    tokenizer = AutoTokenizer.from_pretrained(args.model)
    fixed = with_guided_members(record_expert_rollouts(games, tokenizer, group=args.group, budgets=(70, 30, 15, 8),
                                                       prompt_tokens=1024, completion_tokens=64), args.guided)
    recipe = load_recipe(args.recipe).grpo.model_copy(update={
        "save_steps": None, "games_limit": len(games), "max_steps": args.steps, "num_generations": args.group,
        "guided_per_group": args.guided, "logging_steps": 1})
    arms = {"kl": (recipe, False),
            "beta0_every_turn": (recipe.model_copy(update={"beta": 0.0}), True),
            "beta0_skip": (recipe.model_copy(update={"beta": 0.0}), False)}
    repeats: dict[str, list[dict[str, Any]]] = {name: [] for name in arms}
    for _ in range(args.repeats):
        for name, (settings, every_turn) in arms.items():
            repeats[name].append(train_arm(args.model, settings, fixed, every_turn))
            print(name, {k: v for k, v in repeats[name][-1].items() if k != "weights"}, flush=True)

    def training_seconds(run: dict[str, Any]) -> float:  # a run's scoring passes, then its forwards and backwards
        return sum(run["scoring_seconds"]) + sum(run["train_seconds"])

    runs = {name: min(rs, key=training_seconds) for name, rs in repeats.items()}
    assert runs["beta0_skip"]["skips"] and not runs["beta0_every_turn"]["skips"] and not runs["kl"]["skips"]

    def step_seconds(name: str) -> float:
        return training_seconds(runs[name])

    difference = runs["beta0_skip"]["weights"] - runs["beta0_every_turn"]["weights"]
    result = {
        "model": args.model, "recipe": args.recipe, "beta": recipe.beta, "games": len(games), "group": args.group,
        "guided": args.guided, "steps": args.steps, "loss_type": recipe.loss_type,
        "repeats": args.repeats,
        "arms": {name: [{k: v for k, v in run.items() if k != "weights"} for run in rs] for name, rs in repeats.items()},
        "turns_skipped_share": round(1 - sum(runs["beta0_skip"]["turns_trained"]) / sum(runs["beta0_skip"]["turns"]), 3),
        "training_seconds": {name: round(step_seconds(name), 2) for name in runs},
        "speedup_skip_over_every_turn": round(step_seconds("beta0_every_turn") / step_seconds("beta0_skip"), 2),
        "speedup_skip_over_kl": round(step_seconds("kl") / step_seconds("beta0_skip"), 2),
        "weights_max_abs_difference_beta0_arms": float(difference.abs().max()),
        "note": ("one process, OMP_NUM_THREADS as set by the caller; the arms take turns on the same episodes; "
                 "training_seconds: each arm's fastest repeat, scoring passes plus forwards and backwards"),
    }
    report.write_report(report.RESULTS / "grpo_zero_advantage.json", result)
    print({k: v for k, v in result.items() if k != "arms"})


if __name__ == "__main__":
    main()
