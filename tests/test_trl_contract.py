"""The TRL contract: every TRL internal the GRPO trainer relies on exists with the expected signature, returns
what the trainer expects, and normalizes the loss so that micro-batches add up to the whole batch."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest
import torch

from evoharness.training.grpo import build_grpo_trainer
from evoharness.training.grpo_config import GRPOSettings
from evoharness.training.grpo_samples import micro_batches
from evoharness.training.trl_contract import (
    INTERNALS,
    TESTED_TRANSFORMERS,
    TESTED_TRL,
    Internal,
    check_trl_contract,
)
from tests.conftest import tiny_grpo_settings

REPO = Path(__file__).resolve().parents[1]


def settings(**overrides: object) -> GRPOSettings:
    return tiny_grpo_settings(**({"games_limit": 2, "games_per_step": 2, "num_generations": 2, "max_steps": 1,
                                         "per_device_train_batch_size": 3, "save_steps": None} | overrides))


def generation_batch(trainer, games: list[str]) -> dict:
    """One step's turn samples, generated (replayed) through the trainer's own generation step."""
    inputs = [{"prompt": [{"role": "user", "content": g}], "game_id": g} for g in games for _ in range(2)]
    trainer.model.train()
    return trainer._generate_and_score_completions(inputs)


def test_installed_trl_meets_the_contract() -> None:
    problems = check_trl_contract()
    assert problems == [], "\n".join(problems)


def test_pins_match_the_tested_range() -> None:
    deps = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["dependencies"]
    pins = {re.split(r"[<>=!]", d, maxsplit=1)[0]: d for d in deps}
    assert pins["trl"] == f"trl>={TESTED_TRL[0]},<{TESTED_TRL[1]}"
    assert pins["transformers"] == f"transformers>={TESTED_TRANSFORMERS[0]},<{TESTED_TRANSFORMERS[1]}"


def test_a_changed_internal_is_named_with_what_it_breaks() -> None:
    changed = Internal("GRPOTrainer", "_calculate_rewards", ("inputs", "prompts", "completions", "renamed"),
                       "the reward terms", "its arguments change")
    gone = Internal("GRPOTrainer", "_no_such_method", (), "nothing", "always")
    problems = check_trl_contract((changed, gone))
    assert len(problems) == 2
    assert "GRPOTrainer._calculate_rewards takes" in problems[0] and "breaks if its arguments change" in problems[0]
    assert "GRPOTrainer._no_such_method is gone" in problems[1]
    assert {i.name for i in INTERNALS} >= {"_generate_and_score_completions", "_calculate_rewards",
                                           "_get_per_token_logps_and_entropies", "_prepare_inputs", "_compute_loss"}


def test_private_calls_return_what_the_trainer_expects(tiny_grpo, tmp_path: Path) -> None:
    model_dir, fixed, games = tiny_grpo
    trainer = build_grpo_trainer(str(model_dir), tmp_path, settings(), fixed)
    batch = generation_batch(trainer, games)
    n = sum(len(fixed.episodes[(g, m)].turns) for g in games for m in range(2))
    assert batch["prompt_ids"].size(0) == n == int(batch["global_turns"]) and batch["advantages"].shape == (n,)
    keep = batch["completion_ids"].size(1)
    assert batch["ref_per_token_logps"].shape == (n, keep)  # β > 0: reference log-probs for every sample

    ids = torch.cat([batch["prompt_ids"], batch["completion_ids"]], dim=1)
    mask = torch.cat([batch["prompt_mask"], batch["completion_mask"]], dim=1)
    with torch.no_grad():
        out = trainer._get_per_token_logps_and_entropies(trainer.model, ids, mask, keep, batch_size=3)
    assert isinstance(out, tuple) and len(out) == 3, "(logps, entropies, aux_loss) expected"
    assert out[0].shape == (n, keep)

    rows = [{"prompt": "p", "game_id": g, "trajectory": {"won": False, "turns": 3, "max_steps": 4,
                                                         "distinct_verbs": 1, "repeats": 0, "invalid": 1,
                                                         "harness_calls": 0}} for g in games]
    rewards = trainer._calculate_rewards(rows, ["p"] * len(rows), [[{"role": "assistant", "content": "x"}]] * 2,
                                         [[1], [1]])
    assert rewards.shape == (len(rows), len(trainer.reward_funcs))  # one process: nothing gathered from others
    assert rewards[0, trainer.reward_func_names.index("invalid_penalty")] == pytest.approx(-0.1)


@pytest.mark.parametrize("loss_type", ["dapo", "grpo", "bnpo"])
def test_micro_batches_add_up_to_the_whole_batch(tiny_grpo, tmp_path: Path, loss_type: str) -> None:
    """TRL's loss normalization per loss type, which the micro-batch weights rely on: the weighted losses and
    gradients of micro-batches of 3 equal those of the whole batch in one forward."""
    model_dir, fixed, games = tiny_grpo
    trainer = build_grpo_trainer(str(model_dir), tmp_path, settings(loss_type=loss_type), fixed)
    trainer.current_gradient_accumulation_steps = 1  # what Trainer's loop sets with gradient_accumulation_steps=1
    batch = generation_batch(trainer, games)
    n = batch["prompt_ids"].size(0)

    def loss_and_grad(chunks: list[dict]) -> tuple[float, torch.Tensor]:
        trainer.model.zero_grad()
        total = 0.0
        for chunk in chunks:
            loss = trainer.compute_loss(trainer.model, chunk) * chunk["loss_weight"]
            loss.backward()
            total += float(loss.detach())
        return total, torch.cat([p.grad.flatten() for p in trainer.model.parameters() if p.grad is not None])

    whole_loss, whole_grad = loss_and_grad(micro_batches(batch, n, 1, loss_type))
    parts = micro_batches(batch, 3, -(-n // 3) + 1, loss_type)  # one more than needed: an empty micro-batch
    assert {int(c["prompt_ids"].size(0)) for c in parts} == {3}  # same rows per forward on every process
    assert sum(int(c["completion_mask"].any(dim=1).sum()) for c in parts) == n  # filler rows train nothing
    assert parts[-1]["loss_weight"] == 0.0 and int(parts[-1]["completion_mask"].sum()) == 0
    parts_loss, parts_grad = loss_and_grad(parts)
    assert whole_grad.abs().sum() > 0
    assert parts_loss == pytest.approx(whole_loss, rel=1e-4, abs=1e-7)
    torch.testing.assert_close(parts_grad, whole_grad, rtol=1e-4, atol=1e-7)


@pytest.mark.parametrize("loss_type", ["dapo", "grpo", "bnpo"])
def test_turns_with_zero_advantage_are_skipped_and_the_update_is_the_same(tiny_grpo, tmp_path: Path, loss_type: str,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """With β = 0 the turns of episodes whose advantage is 0 (a guided loss, a group of equal rewards) are left out
    of the forward and backward passes; the step's loss and gradients equal those of training every turn."""
    from evoharness.training.grpo_trainer import EpisodeGRPOTrainer

    model_dir, fixed, games = tiny_grpo
    assert not build_grpo_trainer(str(model_dir), tmp_path / "kl", settings(), fixed).zero_advantage_trains_nothing
    trainer = build_grpo_trainer(str(model_dir), tmp_path, settings(loss_type=loss_type, beta=0.0), fixed)
    trainer.current_gradient_accumulation_steps = 1
    assert trainer.zero_advantage_trains_nothing
    played = [fixed.episodes[(g, m)] for g in games for m in range(2)]
    advantages = torch.tensor([0.7, 0.0, -0.7, 0.0])
    trainer.model.train()
    skipped = trainer._turn_samples(played, advantages, trainer.accelerator.device)
    monkeypatch.setattr(EpisodeGRPOTrainer, "zero_advantage_trains_nothing", property(lambda self: False))
    every = trainer._turn_samples(played, advantages, trainer.accelerator.device)

    def loss_and_grad(batch: dict) -> tuple[float, torch.Tensor]:
        trainer.model.zero_grad()
        total = 0.0
        for chunk in micro_batches(batch, 3, int(batch["micro_batches"]), loss_type):
            loss = trainer.compute_loss(trainer.model, chunk) * chunk["loss_weight"]
            loss.backward()
            total += float(loss.detach())
        return total, torch.cat([p.grad.flatten() for p in trainer.model.parameters() if p.grad is not None])

    zero_turns = len(played[1].turns) + len(played[3].turns)
    assert every["prompt_ids"].size(0) - skipped["prompt_ids"].size(0) == zero_turns > 0
    assert int(skipped["global_turns"]) == int(every["global_turns"])
    assert int(skipped["num_items_in_batch"]) == int(every["num_items_in_batch"])
    assert bool((skipped["advantages"] != 0).all())
    skipped_loss, skipped_grad = loss_and_grad(skipped)
    every_loss, every_grad = loss_and_grad(every)
    assert every_grad.abs().sum() > 0
    assert skipped_loss == pytest.approx(every_loss, rel=1e-4, abs=1e-7)
    torch.testing.assert_close(skipped_grad, every_grad, rtol=1e-4, atol=1e-7)
