"""GRPO with multi-turn rollouts in the environment and the cost-aware reward, on TRL's ``GRPOTrainer``.

Each optimizer step plays ``games_per_step`` train games × ``num_generations`` episodes with the current
model (:mod:`evoharness.training.rollout`), scores every trajectory with the reward terms of
:mod:`evoharness.training.reward` (TRL reward functions, each logged separately), normalizes rewards
within each game's group, and trains on every *turn* as its own sample carrying its trajectory's
advantage: the prompt is rebuilt every turn, so a turn's tokens are scored under exactly the prompt the
model saw when it wrote them. Only ``_generate_and_score_completions`` is replaced; TRL's loss (clipped
ratio, KL to the reference with β), optimizer, scheduler, logging and checkpointing are used unchanged.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field

from evoharness.agents.runner import RunSettings
from evoharness.envs.alfworld import SEED_BANK, GameCatalog
from evoharness.harness.budget import StepBudget
from evoharness.harness.experience import ExperienceBankData, load_bank_file
from evoharness.harness.prompts import Mode, load_prompt_set
from evoharness.teachers.clients.hf_batching import Sampling
from evoharness.training.reward import RewardConfig, TrajectoryStats, reward_functions
from evoharness.training.rollout import Rollout, RolloutEngine
from evoharness.training.student_card import read_student_card, student_prompt_set, write_student_card
from evoharness.training.tiny_student import TINY, is_local_preset
from evoharness.training.trainer_utils import LogCallback, LoraSettings, route_logs, save_trained


class GRPOSettings(BaseModel):
    """The paper's GRPO settings (group 8, 16 games per step, lr 1e-6, KL β 0.01, gradient clip 1.0, 512
    tokens per turn, 70 steps per episode); :meth:`tiny_student` scales them to a CPU and a tiny model."""

    games_per_step: int = Field(default=16, ge=1)
    num_generations: int = Field(default=8, ge=2, description="Episodes per game: the GRPO group.")
    games_limit: int | None = Field(default=None, ge=1, description="Train games to draw from (None: all).")
    epochs: float = Field(default=150, gt=0, description="Passes over the training games.")
    max_steps: int | None = Field(default=None, ge=1, description="Stop after this many optimizer steps.")
    learning_rate: float = Field(default=1e-6, gt=0)
    beta: float = Field(default=0.01, ge=0, description="KL coefficient to the reference (the starting model).")
    max_grad_norm: float = Field(default=1.0, gt=0)
    max_new_tokens: int = Field(default=512, ge=1, description="Completion tokens per turn.")
    temperature: float = Field(default=1.0, gt=0)
    episode_steps: int = Field(default=70, ge=1, description="Step budget per episode.")
    meta_action_cost: int = Field(default=1, ge=0)
    reward: RewardConfig = Field(default_factory=RewardConfig)
    lora: LoraSettings | None = Field(default=None, description="LoRA adapters (None: full fine-tuning).")
    bf16: bool = False
    seed: int = 0
    logging_steps: int = Field(default=1, ge=1)

    @classmethod
    def for_base(cls, base_model: str, call_cost: float | None = None, diversity_max: float | None = None,
                 lora_r: int | None = None, **overrides: Any) -> GRPOSettings:
        """The preset for a student built on ``base_model`` with ``overrides`` (None values keep the preset);
        ``call_cost`` and ``diversity_max`` set λ_call and λ_max of the reward; ``lora_r`` trains LoRA adapters
        of that rank (alpha 2r) instead of every weight (0 or None: full)."""
        given = {k: v for k, v in overrides.items() if v is not None}
        if lora_r:
            given["lora"] = LoraSettings(r=lora_r, alpha=2 * lora_r)
        reward: dict[str, Any] = {"call_cost": call_cost, "diversity_max": diversity_max}
        if any(v is not None for v in reward.values()):
            given["reward"] = RewardConfig(**{k: v for k, v in reward.items() if v is not None})
        if base_model == TINY:
            return cls.tiny_student(**given)
        if is_local_preset(base_model):
            return cls.local_student(**given)
        return cls(**given)

    @classmethod
    def local_student(cls, **overrides: Any) -> GRPOSettings:
        """A student built here that already plays (``small``): groups of 4 on 4 games a step, episodes of 50 steps,
        a step large enough to move a few-million-parameter model within tens of steps."""
        return cls(**({"games_per_step": 4, "num_generations": 4, "epochs": 1, "learning_rate": 2e-5,
                       "max_new_tokens": 48, "episode_steps": 50} | overrides))

    @classmethod
    def tiny_student(cls, **overrides: Any) -> GRPOSettings:
        """Small groups, short episodes, one pass over 32 games and a larger step, for a tiny student on CPU."""
        return cls(**({"games_per_step": 2, "num_generations": 4, "games_limit": 32, "epochs": 1,
                       "learning_rate": 1e-4, "max_new_tokens": 64, "episode_steps": 20} | overrides))


@dataclass
class GRPOResult:
    model_dir: str
    games: int
    steps: int
    seconds: float
    parameters: int
    history: list[dict[str, float]] = field(default_factory=list)  # per logged step: reward terms, episode stats


def _trainer_class() -> type:
    """``EpisodeGRPOTrainer``, built on first use so that importing this module does not import TRL."""
    import torch
    from trl import GRPOTrainer
    from trl.trainer.utils import nanstd, use_adapter

    base: Any = GRPOTrainer  # typed as Any: TRL's attributes are set dynamically

    class EpisodeGRPOTrainer(base):
        """``GRPOTrainer`` whose generation step plays whole episodes and emits one sample per turn."""

        def __init__(self, *args: Any, rollouts: RolloutEngine, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            self.rollouts = rollouts
            self._round = 0

        def _generate_and_score_completions(self, inputs: list[dict[str, Any]]) -> dict[str, Any]:
            device = self.accelerator.device
            mode = "train" if self.model.training else "eval"
            model = self.accelerator.unwrap_model(self.model)
            played = self.rollouts.play([row["game_id"] for row in inputs], model, self.processing_class, self._round)
            self._round += 1
            stats = [TrajectoryStats.from_record(r.record) for r in played]
            rows = [row | {"trajectory": s.as_dict()} for row, s in zip(inputs, stats, strict=True)]
            completions = [[{"role": "assistant", "content": r.record.steps[-1].raw_output if r.record.steps else ""}]
                           for r in played]
            last_turns = [r.turns[-1].completion_ids if r.turns else [] for r in played]
            per_func = self._calculate_rewards(rows, [row["prompt"] for row in inputs], completions, last_turns)
            rewards = (per_func * self.reward_weights.to(device).unsqueeze(0)).nansum(dim=1)
            advantages = group_advantages(rewards, self.num_generations, self.scale_rewards)
            self._log_round(mode, per_func, rewards, stats, played)
            return self._turn_samples(played, advantages, device)

        def _turn_samples(self, played: list[Rollout], advantages: torch.Tensor, device: Any) -> dict[str, Any]:
            output = {k: v.to(device) if isinstance(v, torch.Tensor) else v
                      for k, v in turn_samples(played, advantages, self.processing_class.pad_token_id).items()}
            prompt_ids, prompt_mask = output["prompt_ids"], output["prompt_mask"]
            completion_ids, completion_mask = output["completion_ids"], output["completion_mask"]
            input_ids = torch.cat([prompt_ids, completion_ids], dim=1)
            attention = torch.cat([prompt_mask, completion_mask], dim=1)
            keep, batch = completion_ids.size(1), self.args.per_device_train_batch_size
            with torch.no_grad():
                if self.args.gradient_accumulation_steps % (self.args.steps_per_generation * self.num_iterations):
                    output["old_per_token_logps"] = self._get_per_token_logps_and_entropies(
                        self.model, input_ids, attention, keep, batch_size=batch)[0]
                if self.beta != 0.0:
                    output["ref_per_token_logps"] = self._reference_logps(input_ids, attention, keep, batch)
            self._metrics["train" if self.model.training else "eval"]["samples/turns"].append(
                float(prompt_ids.size(0)))
            return output

        def _reference_logps(self, input_ids: torch.Tensor, attention: torch.Tensor, keep: int,
                             batch: int) -> torch.Tensor:
            if self.ref_model is not None:
                return self._get_per_token_logps_and_entropies(self.ref_model, input_ids, attention, keep,
                                                               batch_size=batch)[0]
            model = self.accelerator.unwrap_model(self.model)
            with use_adapter(model, adapter_name="ref" if "ref" in model.peft_config else None):
                return self._get_per_token_logps_and_entropies(self.model, input_ids, attention, keep,
                                                               batch_size=batch)[0]

        def _log_round(self, mode: str, per_func: torch.Tensor, rewards: torch.Tensor,
                       stats: list[TrajectoryStats], played: list[Rollout]) -> None:
            metrics = self._metrics[mode]
            for i, name in enumerate(self.reward_func_names):
                metrics[f"rewards/{name}/mean"].append(torch.nanmean(per_func[:, i]).item())
            metrics["reward"].append(torch.nanmean(rewards).item())
            metrics["reward_std"].append(nanstd(rewards).item())
            grouped_std = nanstd(rewards.view(-1, self.num_generations), dim=1)
            metrics["frac_reward_zero_std"].append(torch.isclose(grouped_std, torch.zeros_like(grouped_std))
                                                   .float().mean().item())
            n = len(stats)
            metrics["episode/success"].append(sum(s.won for s in stats) / n)
            metrics["episode/turns"].append(sum(s.turns for s in stats) / n)
            metrics["episode/harness_calls"].append(sum(s.harness_calls for s in stats) / n)
            metrics["episode/invalid"].append(sum(s.invalid for s in stats) / n)
            metrics["episode/repeats"].append(sum(s.repeats for s in stats) / n)
            metrics["episode/failed"].append(sum(r.record.status == "failed" for r in played) / n)

    return EpisodeGRPOTrainer


def group_advantages(rewards: Any, group: int, scale: str = "group") -> Any:
    """GRPO advantages: each reward minus its group's mean (``group`` consecutive episodes of one game), divided
    by the group's std (``scale="group"``), the batch's std (``"batch"``) or nothing (``"none"``)."""
    from trl.trainer.utils import nanstd

    grouped = rewards.view(-1, group)
    centred = (grouped - grouped.mean(dim=1, keepdim=True)).view(-1)
    if scale == "none":
        return centred
    if scale == "batch":
        return centred / (nanstd(rewards) + 1e-4)
    return centred / (nanstd(grouped, dim=1).repeat_interleave(group) + 1e-4)


def turn_samples(played: list[Rollout], advantages: Any, pad_id: int) -> dict[str, Any]:
    """One training sample per turn: its prompt (left-padded) and completion (right-padded) ids with masks, and
    the advantage of the trajectory it belongs to. An empty completion is one masked-out pad token."""
    import torch
    from trl.trainer.utils import pad

    samples = [(turn, advantages[i]) for i, rollout in enumerate(played) for turn in rollout.turns]
    if not samples:
        raise RuntimeError("No turn was played in this round: every episode failed before its first turn.")
    completion_mask = pad([torch.ones(len(t.completion_ids), dtype=torch.long) if t.completion_ids
                           else torch.zeros(1, dtype=torch.long) for t, _ in samples],
                          padding_value=0, padding_side="right")
    return {
        "prompt_ids": pad([torch.tensor(t.prompt_ids) for t, _ in samples], padding_value=pad_id,
                          padding_side="left"),
        "prompt_mask": pad([torch.ones(len(t.prompt_ids), dtype=torch.long) for t, _ in samples], padding_value=0,
                           padding_side="left"),
        "completion_ids": pad([torch.tensor(t.completion_ids or [pad_id]) for t, _ in samples],
                              padding_value=pad_id, padding_side="right"),
        "completion_mask": completion_mask,
        "advantages": torch.stack([a for _, a in samples]),
        "num_items_in_batch": completion_mask.sum(),
    }


def training_games(settings: GRPOSettings, data_root: str | None = None) -> list[str]:
    """The train-split games GRPO draws from (evaluation splits are never used for training)."""
    return [g.game_id for g in GameCatalog(data_root).games("train", settings.games_limit)]


def train_grpo(model_path: str, output_dir: str | Path, settings: GRPOSettings, *,
               bank: ExperienceBankData | None = None,
               data_root: str | None = None, engine: str | None = None,
               on_log: LogCallback | None = None) -> GRPOResult:
    """GRPO from the model at ``model_path`` (an SFT model version); saves to ``<output_dir>/model``."""
    import datasets
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import GRPOConfig

    output = Path(output_dir)
    prompt_set = student_prompt_set(model_path, Mode.BPE)  # the rendering the student was trained with
    games = training_games(settings, data_root)
    dataset = datasets.Dataset.from_list([{"prompt": [{"role": "user", "content": g}], "game_id": g} for g in games])
    tokenizer = AutoTokenizer.from_pretrained(model_path)
    model = AutoModelForCausalLM.from_pretrained(model_path, dtype="auto")
    run_settings = RunSettings(
        budget=StepBudget(max_steps=settings.episode_steps, meta_action_cost=settings.meta_action_cost),
        concurrency=settings.games_per_step * settings.num_generations, bank=bank or load_bank_file(SEED_BANK),
    )
    rollouts = RolloutEngine(
        load_prompt_set(prompt_set), run_settings,
        Sampling(max_new_tokens=settings.max_new_tokens, temperature=settings.temperature),
        data_root=data_root, engine=engine,
    )
    group = settings.num_generations
    config = GRPOConfig(
        output_dir=str(output / "checkpoints"), per_device_train_batch_size=group,
        steps_per_generation=settings.games_per_step, gradient_accumulation_steps=settings.games_per_step,
        num_generations=group, num_train_epochs=settings.epochs, max_steps=settings.max_steps or -1,
        learning_rate=settings.learning_rate, beta=settings.beta, max_grad_norm=settings.max_grad_norm,
        max_completion_length=settings.max_new_tokens, temperature=settings.temperature, bf16=settings.bf16,
        seed=settings.seed, logging_steps=settings.logging_steps, save_strategy="no", report_to="none",
        disable_tqdm=True, dataloader_pin_memory=False, reward_weights=[1.0] * len(reward_functions(settings.reward)),
    )
    trainer = _trainer_class()(model=model, reward_funcs=reward_functions(settings.reward), args=config,
                               train_dataset=dataset, processing_class=tokenizer,
                               peft_config=settings.lora.peft_config() if settings.lora is not None else None,
                               rollouts=rollouts)
    route_logs(trainer, on_log)
    started = time.perf_counter()
    try:
        trainer.train()
    finally:
        rollouts.close()
    seconds = time.perf_counter() - started
    model_dir = output / "model"
    trained = save_trained(trainer, tokenizer, model_dir, merged_lora=settings.lora is not None)
    history = [{k: float(v) for k, v in entry.items() if isinstance(v, int | float)}
               for entry in trainer.state.log_history if "reward" in entry]
    write_student_card(model_dir, read_student_card(model_path).get("prompt_set"), {
        "settings": settings.model_dump(mode="json") | {"view": "bpe"}, "start": model_path, "games": len(games)})
    return GRPOResult(model_dir=str(model_dir), games=len(games), steps=trainer.state.global_step, seconds=seconds,
                      parameters=sum(p.numel() for p in trained.parameters()), history=history)
