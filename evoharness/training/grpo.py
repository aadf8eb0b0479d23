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

import contextlib
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Literal, Protocol

from pydantic import BaseModel, Field, model_validator

from evoharness.agents.runner import RunSettings
from evoharness.envs.alfworld import SEED_BANK, GameCatalog
from evoharness.harness.budget import StepBudget
from evoharness.harness.experience import ExperienceBankData, load_bank_file
from evoharness.harness.prompts import Mode, load_prompt_set
from evoharness.teachers.clients.hf_batching import Sampling
from evoharness.training.hardware import bf16_is_fast
from evoharness.training.reward import RewardConfig, TrajectoryStats, reward_functions
from evoharness.training.rollout import Rollout, RolloutEngine
from evoharness.training.student_card import read_student_card, student_prompt_set, write_student_card
from evoharness.training.tiny_student import TINY, is_local_preset
from evoharness.training.trainer_utils import (
    LogCallback,
    LoraSettings,
    newest_checkpoint,
    route_logs,
    save_trained,
)


class GRPOSettings(BaseModel):
    """The paper's GRPO settings (group 8, 16 games per step, lr 1e-6, KL β 0.01, gradient clip 1.0, 512
    tokens per turn, 70 steps per episode); :meth:`tiny_student` scales them to a CPU and a tiny model."""

    games_per_step: int = Field(default=16, ge=1)
    num_generations: int = Field(default=8, ge=2, description="Episodes per game: the GRPO group.")
    games_limit: int | None = Field(default=None, ge=1, description="Train games to draw from (None: all).")
    games: list[str] | None = Field(default=None, min_length=1, description=(
        "Draw only these train games, by id (a curriculum: see curriculum.lost_train_games); None: the catalog's "
        "first games_limit."))
    games_from: str | None = Field(default=None, description="Where ``games`` came from, for lineage (e.g. the "
                                   "policy whose lost train games they are).")
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
    scale_rewards: Literal["group", "batch", "none"] = Field(default="group", description=(
        "What a group-centred reward is divided by: its group's std (the paper's GRPO), the batch's std, or "
        "nothing. With 'group', a group where every episode fails has its tiny repeat/diversity differences "
        "scaled up to the size of a win's advantage."))
    forced_tokens_in_loss: bool = Field(default=False, description=(
        "Score the tokens that constrained decoding forced (one allowed token) in the loss and KL. Off: only "
        "tokens that were a choice are scored. A forced token has probability 1 under the constrained policy "
        "(no gradient); scoring it pushes the unconstrained model's probability of it up or down for nothing "
        "(a losing episode's forced tokens are driven towards 0, and the KL estimate with them: 198 at step 8 of "
        "a lr 3e-4 run). Runs before 2026-12-02 scored them."))
    episode_level_loss: bool = Field(default=False, description=(
        "Weigh every episode equally in the loss, as GRPO weighs one completion: an episode's scored tokens share "
        "one episode's weight (its advantage times mean tokens per episode / its tokens). Off: every scored token "
        "weighs the same (TRL's dapo), so a lost 70-turn episode outweighs a won 15-turn one about 4 : 1 and a "
        "group's push-down on its losses outweighs its push-up on its wins, though its advantages sum to 0."))
    avoid_repeats: bool = Field(default=False, description=(
        "Rollouts decode as `evaluate --avoid-repeats` plays: constrained decoding leaves out the environment "
        "commands the episode already issued in the same state (not with a vLLM server)."))
    guided_per_group: int = Field(default=0, ge=0, description=(
        "Episodes of each group that decode without repeats (as avoid_repeats), the rest as the policy samples: "
        "where the policy loops to a loss and a guided episode of the same game wins, the group's advantages push "
        "up the command the guard chose in place of the repeat and push down the loop. 0: none."))
    bf16: bool = Field(default=False, description="bf16 mixed precision in the training passes (GPUs; CPUs with "
                       "bf16 units). Rollouts generate with the weights as stored.")
    gradient_checkpointing: bool = Field(default=True, description="Recompute activations in the backward pass "
                                         "(a large base needs it; a student built here does not).")
    seed: int = 0
    logging_steps: int = Field(default=1, ge=1)
    loss_type: str = Field(default="dapo", description="TRL's loss type (see LOSS_NORMALIZATION for the supported).")
    per_device_train_batch_size: int = Field(default=8, ge=1, description=(
        "Turn samples per forward pass on each process (a micro-batch); a step's gradients accumulate across its "
        "micro-batches."))
    save_steps: int | None = Field(default=10, ge=1, description=(
        "Checkpoint every this many optimizer steps; a rerun resumes from the newest (None: no checkpoints)."))
    vllm_server_url: str | None = Field(default=None, description=(
        "Generate rollouts with a `trl vllm-serve` server at this URL (TRL's vLLM integration syncs the weights "
        "every step); None: HF generate in the training process."))

    @model_validator(mode="after")
    def _repeats_need_constraints(self) -> GRPOSettings:
        if (self.avoid_repeats or self.guided_per_group) and self.vllm_server_url is not None:
            raise ValueError("avoid_repeats and guided_per_group work through constrained decoding, which a vLLM "
                             "server does not apply")
        if self.guided_per_group and (self.avoid_repeats or self.guided_per_group >= self.num_generations):
            raise ValueError(f"guided_per_group ({self.guided_per_group}) guides some of a group's "
                             f"{self.num_generations} episodes and leaves at least one to the policy (avoid_repeats "
                             "guides them all)")
        return self

    def guided(self, position: int) -> bool:
        """Whether the episode at ``position`` in a step's batch (groups of ``num_generations`` in a row) is
        guided: every one under avoid_repeats, else the first ``guided_per_group`` of each group."""
        return self.avoid_repeats or position % self.num_generations < self.guided_per_group

    @model_validator(mode="after")
    def _episode_weights_need_a_token_loss(self) -> GRPOSettings:
        if self.episode_level_loss and LOSS_NORMALIZATION.get(self.loss_type) != "tokens":
            raise ValueError(f"episode_level_loss reweighs a loss normalized over tokens (loss_type "
                             f"{sorted(k for k, v in LOSS_NORMALIZATION.items() if v == 'tokens')}), not "
                             f"{self.loss_type!r}")
        return self

    @model_validator(mode="after")
    def _games_or_limit(self) -> GRPOSettings:
        if self.games is not None and self.games_limit is not None:
            raise ValueError("games names the train games to draw; games_limit takes the catalog's first N: give one")
        return self

    OPERATIONAL: ClassVar[frozenset[str]] = frozenset({"per_device_train_batch_size", "save_steps",
                                                       "vllm_server_url"})
    """Fields that change how a run executes, not what it trains: not part of a model version's id."""
    ID_OMITTED_WHEN_OFF: ClassVar[frozenset[str]] = frozenset({"avoid_repeats", "games", "games_from",
                                                               "episode_level_loss", "guided_per_group"})
    """Switches added after versions were trained: left out of the id while off, so those versions keep theirs."""

    @classmethod
    def for_base(cls, base_model: str, call_cost: float | None = None, diversity_max: float | None = None,
                 repeat_cap: int | None = None, lora_r: int | None = None, **overrides: Any) -> GRPOSettings:
        """The preset for a student built on ``base_model`` with ``overrides`` (None values keep the preset);
        ``call_cost``, ``diversity_max`` and ``repeat_cap`` set λ_call, λ_max and the repeats counted by the
        reward's repeat penalty; ``lora_r`` trains LoRA adapters of that rank (alpha 2r) instead of every weight
        (0 or None: full)."""
        given: dict[str, Any] = {k: v for k, v in overrides.items() if v is not None}
        if lora_r:
            given["lora"] = LoraSettings(r=lora_r, alpha=2 * lora_r)
        reward: dict[str, Any] = {"call_cost": call_cost, "diversity_max": diversity_max, "repeat_cap": repeat_cap}
        if any(v is not None for v in reward.values()):
            given["reward"] = RewardConfig(**{k: v for k, v in reward.items() if v is not None})
        if base_model == TINY:
            return cls.tiny_student(**given)
        if is_local_preset(base_model):
            return cls.local_student(**given)
        return cls(**given)

    @classmethod
    def local_student(cls, **overrides: Any) -> GRPOSettings:
        """A student built here that already plays (``small``): groups of 4 on 4 games a step, episodes of 70 steps
        (the budget its SFT examples were rendered with: "Step k/N" is in every prompt),
        a step large enough to move a few-million-parameter model within tens of steps, advantages scaled by the
        batch's std (a win, not a failed group's repeat count, is what moves the policy), bf16 training passes
        where the machine has bf16 units (:func:`bf16_is_fast`), every episode weighed alike in the loss (from the
        1-epoch student, token-weighted GRPO lost 7.1 / 5.2 points seen / unseen where episode-weighted gained
        8.6 / 1.5: README, Student results)."""
        preset: dict[str, Any] = {"games_per_step": 4, "num_generations": 4, "epochs": 1, "learning_rate": 3e-5,
                                  "max_new_tokens": 48, "episode_steps": 70, "scale_rewards": "batch",
                                  "bf16": bf16_is_fast(), "gradient_checkpointing": False, "episode_level_loss": True}
        return cls(**(preset | overrides))

    @classmethod
    def tiny_student(cls, **overrides: Any) -> GRPOSettings:
        """Small groups, short episodes, one pass over 32 games and a larger step, for a tiny student on CPU."""
        return cls(**({"games_per_step": 2, "num_generations": 4, "games_limit": 32, "epochs": 1,
                       "learning_rate": 1e-4, "max_new_tokens": 64, "episode_steps": 20,
                       "gradient_checkpointing": False} | overrides))


class RolloutSource(Protocol):
    """What GRPO plays episodes with: :class:`RolloutEngine`, or recorded rollouts replayed
    (:class:`evoharness.training.fixed_rollouts.FixedRollouts`)."""

    def play(self, game_ids: list[str], model: Any, tokenizer: Any, round_id: int,
             first_index: int = 0) -> list[Rollout]: ...

    def close(self) -> None: ...


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
    from trl.models.utils import unwrap_model_for_generation
    from trl.trainer.utils import nanstd, use_adapter

    from evoharness.training.trl_contract import require_trl_contract

    require_trl_contract()
    base: Any = GRPOTrainer  # typed as Any: TRL's attributes are set dynamically

    class EpisodeGRPOTrainer(base):
        """``GRPOTrainer`` whose generation step plays whole episodes and emits one sample per turn, trained in
        micro-batches of at most ``micro_batch_size`` turns with gradients accumulated across them."""

        def __init__(self, *args: Any, rollouts: RolloutSource, micro_batch_size: int,
                     repeats_at: str = "environment", forced_tokens_in_loss: bool = False,
                     episode_level_loss: bool = False, guided_wins_only: bool = False, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            self.repeats_at, self.forced_tokens_in_loss = repeats_at, forced_tokens_in_loss
            self.episode_level_loss, self.guided_wins_only = episode_level_loss, guided_wins_only
            if self.loss_type not in LOSS_NORMALIZATION:
                raise ValueError(f"loss_type {self.loss_type!r} is not supported by the per-turn micro-batching "
                                 f"(supported: {sorted(LOSS_NORMALIZATION)})")
            self.rollouts, self.micro_batch_size = rollouts, micro_batch_size
            self.turn_log: list[dict[str, Any]] = []  # per round: this process's (episode index, turns, advantage)

        # -- generation: whole episodes, one sample per turn ------------------------------------------------
        def _generate_and_score_completions(self, inputs: list[dict[str, Any]]) -> dict[str, Any]:
            device = self.accelerator.device
            mode = "train" if self.model.training else "eval"
            first = self.accelerator.process_index * len(inputs)  # this process's slice of the global batch
            round_id = self.state.global_step
            if self.use_vllm and round_id != getattr(self, "_last_loaded_step", -1):
                self.vllm_generation.sync_weights()  # every process takes part; the server gets the new weights
                self._last_loaded_step = round_id
            with unwrap_model_for_generation(self.model_wrapped, self.accelerator,
                                             gather_deepspeed3_params=self.args.ds3_gather_for_generation) as model:
                played = self.rollouts.play([row["game_id"] for row in inputs], model, self.processing_class,
                                            round_id, first_index=first)
            stats = [TrajectoryStats.from_record(r.record, self.repeats_at) for r in played]
            rows = [row | {"trajectory": s.as_dict()} for row, s in zip(inputs, stats, strict=True)]
            completions = [[{"role": "assistant", "content": r.record.steps[-1].raw_output if r.record.steps else ""}]
                           for r in played]
            last_turns = [r.turns[-1].completion_ids if r.turns else [] for r in played]
            # gathered over every process: rewards are normalized within groups that may span processes
            per_func = self._calculate_rewards(rows, [row["prompt"] for row in inputs], completions, last_turns)
            rewards = (per_func * self.reward_weights.to(device).unsqueeze(0)).nansum(dim=1)
            advantages = group_advantages(rewards, self.num_generations, self.scale_rewards)
            local = advantages[first:first + len(inputs)]  # TRL's process_slice
            if self.guided_wins_only:
                local = wins_only_when_guided(local, torch.tensor([r.guided for r in played], device=device))
            self.turn_log.append({"round": round_id, "episodes": [
                {"index": first + i, "game_id": row["game_id"], "turns": len(r.turns), "advantage": float(a)}
                for i, (row, r, a) in enumerate(zip(inputs, played, local.tolist(), strict=True))]})
            self._log_round(mode, per_func, rewards, stats, played)
            return self._turn_samples(played, local, device)

        def _turn_samples(self, played: list[Rollout], advantages: torch.Tensor, device: Any) -> dict[str, Any]:
            choices_only = not self.forced_tokens_in_loss
            if self.episode_level_loss:
                tokens = torch.tensor([float(episode_loss_tokens(r, choices_only)) for r in played], device=device)
                # the mean over every process's episodes, as the loss normalizes over every process's tokens
                total = self.accelerator.gather(torch.stack([tokens.sum(), torch.tensor(float(len(played)),
                                                                                          device=device)]).unsqueeze(0))
                mean = float(total[:, 0].sum() / total[:, 1].sum())
                advantages = episode_weighted(advantages.to(device), tokens, mean)
            output = {k: v.to(device) if isinstance(v, torch.Tensor) else v
                      for k, v in turn_samples(played, advantages, self.processing_class.pad_token_id,
                                               choices_only=choices_only).items()}
            prompt_ids, prompt_mask = output["prompt_ids"], output["prompt_mask"]
            completion_ids, completion_mask = output["completion_ids"], output["completion_mask"]
            # every process needs the global counts: the loss normalizes over all processes' turns and tokens,
            # and all processes must run the same number of micro-batches (TRL's loss logs with collectives)
            local = torch.tensor([prompt_ids.size(0), int(loss_mask(output).sum())], device=device)
            counts = self.accelerator.gather(local.unsqueeze(0)).view(-1, 2)
            output["num_items_in_batch"] = counts[:, 1].sum()
            output["global_turns"] = counts[:, 0].sum()
            output["micro_batches"] = torch.ceil(counts[:, 0].max() / self.micro_batch_size).long()
            input_ids = torch.cat([prompt_ids, completion_ids], dim=1)
            attention = torch.cat([prompt_mask, completion_mask], dim=1)
            keep, batch = completion_ids.size(1), self.micro_batch_size
            with torch.no_grad():
                if self.args.gradient_accumulation_steps % (self.args.steps_per_generation * self.num_iterations):
                    output["old_per_token_logps"] = self._get_per_token_logps_and_entropies(
                        self.model, input_ids, attention, keep, batch_size=batch)[0]
                if self.beta != 0.0:
                    output["ref_per_token_logps"] = self._reference_logps(input_ids, attention, keep, batch)
            metrics = self._metrics["train" if self.model.training else "eval"]
            metrics["samples/turns"].append(float(output["global_turns"]))
            metrics["samples/micro_batches"].append(float(output["micro_batches"]))
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

        # -- training: every turn once per iteration, in bounded micro-batches --------------------------------
        def training_step(self, model: Any, inputs: Any, num_items_in_batch: Any = None) -> torch.Tensor:
            """One optimizer step's forward and backward passes: the step's turn samples (generated on the first
            call of an iteration, then buffered by TRL) in micro-batches; gradients accumulate across them and
            are synchronized across processes on the last one."""
            from accelerate.utils import DistributedType

            model.train()
            batch = self._prepare_inputs(inputs)
            chunks = micro_batches(batch, self.micro_batch_size, int(batch["micro_batches"]), self.loss_type,
                                   self.accelerator.num_processes)
            deepspeed = self.accelerator.distributed_type == DistributedType.DEEPSPEED
            total = torch.zeros((), device=self.accelerator.device)
            for i, chunk in enumerate(chunks):
                last = i == len(chunks) - 1
                self.accelerator.gradient_state._set_sync_gradients(last)
                sync = contextlib.nullcontext() if last or deepspeed else self.accelerator.no_sync(model)
                with sync:
                    with self.compute_loss_context_manager():
                        loss = self.compute_loss(model, chunk) * chunk["loss_weight"]
                    self.accelerator.backward(loss, **({"scale_wrt_gas": False} if deepspeed else {}))
                total += loss.detach()
                self.peak_micro_batch = max(getattr(self, "peak_micro_batch", 0), int(chunk["prompt_ids"].size(0)))
            self._step += 1
            return total

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
            local = torch.tensor([[len(stats), sum(s.won for s in stats), sum(s.turns for s in stats),
                                   sum(s.harness_calls for s in stats), sum(s.invalid for s in stats),
                                   sum(s.repeats for s in stats), sum(r.record.status == "failed" for r in played),
                                   sum(r.guided for r in played), sum(s.won for s, r in zip(stats, played) if r.guided)]],
                                 dtype=torch.float64, device=self.accelerator.device)
            n, won, turns, calls, invalid, repeats, failed, guided, guided_won = \
                self.accelerator.gather(local).sum(dim=0).tolist()
            metrics["episode/success"].append(won / n)
            if 0 < guided < n:  # the policy's own episodes and the guided ones apart: does the policy learn the guard?
                metrics["episode/success_unguided"].append((won - guided_won) / (n - guided))
                metrics["episode/success_guided"].append(guided_won / guided)
            metrics["episode/turns"].append(turns / n)
            metrics["episode/harness_calls"].append(calls / n)
            metrics["episode/invalid"].append(invalid / n)
            metrics["episode/repeats"].append(repeats / n)
            metrics["episode/failed"].append(failed / n)

    return EpisodeGRPOTrainer


LOSS_NORMALIZATION = {"dapo": "tokens", "cispo": "tokens", "vespo": "tokens", "bnpo": "chunk_tokens",
                      "grpo": "sequences", "sapo": "sequences", "luspo": "sequences", "dr_grpo": "sequences"}
"""How TRL's ``_compute_loss`` normalizes each loss type, which fixes the weight of a micro-batch's loss:
``tokens``: by ``num_items_in_batch`` (set to the tokens of every process), weight 1; ``sequences``: a mean over
the micro-batch's sequences, weight = its sequences × processes / all sequences; ``chunk_tokens``: a mean over its
tokens, weight = its tokens × processes / all tokens."""


def micro_batches(batch: dict[str, Any], size: int, count: int, loss_type: str, processes: int = 1
                  ) -> list[dict[str, Any]]:
    """``batch``'s turn samples in ``count`` micro-batches of exactly ``size`` rows, in order, every sample in
    exactly one; padding columns that a micro-batch does not use are cut. Rows past the samples are filler (one
    prompt token, no completion token, advantage 0: they add nothing to the loss): TRL's loss gathers per-row
    metrics across processes, so every process must run the same number of forwards of the same number of
    rows. Each micro-batch carries ``loss_weight``: the factor that makes the sum of the micro-batches' losses
    over all processes the loss of the whole batch (see ``LOSS_NORMALIZATION``)."""
    import torch

    n = batch["prompt_ids"].size(0)
    if size < 1 or count < -(-n // size):
        raise ValueError(f"{n} samples do not fit in {count} micro-batches of {size}")
    total_sequences, total_tokens = float(batch["global_turns"]), float(batch["num_items_in_batch"])
    kind = LOSS_NORMALIZATION[loss_type]
    chunks = []
    for start in range(0, count * size, size):
        rows = torch.arange(min(start, n), min(start + size, n))
        chunk = _with_filler(_rows(batch, rows, n), _rows(batch, torch.tensor([0]), n), size - rows.numel())
        chunk = _trim_padding(chunk)
        if rows.numel() == 0:
            weight = 0.0
        elif kind == "tokens":
            weight = 1.0
        elif kind == "sequences":
            weight = size * processes / total_sequences
        else:
            weight = float(loss_mask(chunk).sum()) * processes / max(total_tokens, 1.0)
        chunk["loss_weight"] = weight
        chunks.append(chunk)
    return chunks


def _with_filler(chunk: dict[str, Any], template: dict[str, Any], count: int) -> dict[str, Any]:
    """``chunk`` with ``count`` filler rows appended: copies of ``template`` (one sample) reduced to its last
    prompt token, with no completion token and advantage 0."""
    import torch

    if count == 0:
        return chunk
    out: dict[str, Any] = {}
    for key, value in chunk.items():
        row = template[key]
        if not (isinstance(row, torch.Tensor) and row.ndim > 0 and row.size(0) == 1) or key in SCALARS:
            out[key] = value
            continue
        filler = row.expand(count, *row.shape[1:]).clone()
        if key == "prompt_mask":
            filler.zero_()
            filler[:, -1] = 1
        elif key in ("completion_mask", "tool_mask", "advantages"):
            filler.zero_()
        out[key] = torch.cat([value, filler])
    return out


SCALARS = ("global_turns", "num_items_in_batch", "micro_batches")


def _rows(batch: dict[str, Any], rows: Any, n: int) -> dict[str, Any]:
    """The given rows of every per-sample entry; scalars and other entries unchanged."""
    import torch

    out: dict[str, Any] = {}
    for key, value in batch.items():
        if isinstance(value, torch.Tensor) and value.ndim > 0 and value.size(0) == n:
            out[key] = value[rows.to(value.device)]
        elif isinstance(value, list) and len(value) == n:
            out[key] = [value[i] for i in rows.tolist()]
        else:
            out[key] = value
    return out


COMPLETION_ALIGNED = ("completion_ids", "completion_mask", "old_per_token_logps", "ref_per_token_logps",
                      "sampling_per_token_logps", "importance_sampling_ratio", "tool_mask")


def _trim_padding(chunk: dict[str, Any]) -> dict[str, Any]:
    """Drop the left prompt padding and right completion padding that no sample of ``chunk`` uses."""
    prompt_used = chunk["prompt_mask"].any(dim=0).nonzero()
    start = int(prompt_used[0]) if prompt_used.numel() else 0
    completion_used = chunk["completion_mask"].any(dim=0).nonzero()
    end = int(completion_used[-1]) + 1 if completion_used.numel() else 1
    width = chunk["completion_ids"].size(1)
    out = dict(chunk)
    out["prompt_ids"], out["prompt_mask"] = chunk["prompt_ids"][:, start:], chunk["prompt_mask"][:, start:]
    for key in COMPLETION_ALIGNED:
        value = chunk.get(key)
        if value is not None and value.ndim == 2 and value.size(1) == width:
            out[key] = value[:, :end]
    return out


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


def wins_only_when_guided(advantages: Any, guided: Any) -> Any:
    """In guided groups (``guided_per_group``; not under ``avoid_repeats``, where no episode is the policy's own) a
    guided episode teaches by what it did better than its group only: its negative advantage becomes 0. Its
    commands include the ones the guard chose in place of a repeat, which the policy gives a low probability;
    pushing those further down teaches nothing the policy would play and drives their log-probabilities, and the
    KL estimate exp(ref - logp), without bound (KL 444 at step 7 of a run at lr 3e-4 that pushed them down; a peak of
    0.04-0.36 over 12 steps in three seeds with them at 0, at lr 2e-4)."""
    import torch

    return torch.where(guided & (advantages < 0), torch.zeros_like(advantages), advantages)


def episode_loss_tokens(rollout: Rollout, choices_only: bool = False) -> int:
    """The completion tokens of ``rollout`` that the loss scores (:func:`turn_samples`' ``loss_mask``)."""
    return sum(sum(t.choices) if choices_only and t.choices is not None and t.completion_ids
               else len(t.completion_ids) for t in rollout.turns)


def episode_weighted(advantages: Any, tokens: Any, mean_tokens: float) -> Any:
    """Advantages that make a token-normalized loss (Σ A·ratio over tokens / all tokens) the mean over episodes
    of each episode's token mean: each advantage times ``mean_tokens`` / its episode's scored ``tokens`` (an
    episode with none scored keeps 0)."""
    import torch

    return torch.where(tokens > 0, advantages * mean_tokens / tokens.clamp(min=1), torch.zeros_like(advantages))


def turn_samples(played: list[Rollout], advantages: Any, pad_id: int, choices_only: bool = False
                 ) -> dict[str, Any]:
    """One training sample per turn: its prompt (left-padded) and completion (right-padded) ids with masks, and
    the advantage of the trajectory it belongs to. An empty completion is one masked-out pad token. With
    ``choices_only``, forced tokens stay in the completion (attended to) but out of the loss: TRL's
    ``tool_mask`` (its mask of completion tokens the model did not choose) keeps only ``TurnTokens.choices``."""
    import torch
    from trl.trainer.utils import pad

    samples = [(turn, advantages[i]) for i, rollout in enumerate(played) for turn in rollout.turns]
    if not samples:
        raise RuntimeError("No turn was played in this round: every episode failed before its first turn.")
    completion_mask = pad([torch.ones(len(t.completion_ids), dtype=torch.long) if t.completion_ids
                           else torch.zeros(1, dtype=torch.long) for t, _ in samples],
                          padding_value=0, padding_side="right")
    output = {
        "prompt_ids": pad([torch.tensor(t.prompt_ids) for t, _ in samples], padding_value=pad_id,
                          padding_side="left"),
        "prompt_mask": pad([torch.ones(len(t.prompt_ids), dtype=torch.long) for t, _ in samples], padding_value=0,
                           padding_side="left"),
        "completion_ids": pad([torch.tensor(t.completion_ids or [pad_id]) for t, _ in samples],
                              padding_value=pad_id, padding_side="right"),
        "completion_mask": completion_mask,
        "advantages": torch.stack([a for _, a in samples]),
    }
    if choices_only and any(t.choices is not None for t, _ in samples):
        output["tool_mask"] = pad([torch.tensor(t.choices if t.choices is not None and t.completion_ids
                                                else [1] * max(len(t.completion_ids), 1), dtype=torch.long)
                                   for t, _ in samples], padding_value=0, padding_side="right")
    output["num_items_in_batch"] = loss_mask(output).sum()
    return output


def loss_mask(batch: dict[str, Any]) -> Any:
    """The completion tokens the loss scores: ``completion_mask``, times ``tool_mask`` where there is one (as
    TRL's ``_compute_loss`` does)."""
    mask = batch["completion_mask"]
    return mask * batch["tool_mask"] if "tool_mask" in batch else mask


def training_games(settings: GRPOSettings, data_root: str | None = None) -> list[str]:
    """The train-split games GRPO draws from: ``settings.games`` or the catalog's first ``games_limit``. Evaluation
    splits are never used for training: a named game that is not a train game is refused."""
    train = [g.game_id for g in GameCatalog(data_root).games("train")]
    if settings.games is None:
        return train[:settings.games_limit]
    outside = sorted(set(settings.games) - set(train))
    if outside:
        raise ValueError(f"GRPO trains on train games only; {len(outside)} of settings.games are not train games "
                         f"under this data root, e.g. {outside[0]!r}")
    return list(settings.games)


def train_grpo(model_path: str, output_dir: str | Path, settings: GRPOSettings, *,
               bank: ExperienceBankData | None = None,
               data_root: str | None = None, engine: str | None = None,
               on_log: LogCallback | None = None, rollouts: RolloutSource | None = None) -> GRPOResult:
    """GRPO from the model at ``model_path`` (an SFT model version); saves to ``<output_dir>/model``.

    Runs in one process or under ``accelerate launch`` (each process plays its share of a step's episodes;
    rewards are normalized over all of them). Checkpoints go to ``<output_dir>/checkpoints`` every
    ``settings.save_steps`` steps, and a rerun resumes from the newest. ``rollouts`` replaces the episodes played
    in the environment (recorded rollouts, for tests and the multi-process comparison)."""
    output = Path(output_dir)
    if rollouts is None:
        prompt_set = student_prompt_set(model_path, Mode.BPE)  # the rendering the student was trained with
        rollouts = rollout_engine(settings, bank, data_root, engine, prompt_set)
    trainer = build_grpo_trainer(model_path, output_dir, settings, rollouts, data_root)
    games = len(trainer.train_dataset)
    route_logs(trainer, on_log)
    started = time.perf_counter()
    try:
        trainer.train(resume_from_checkpoint=newest_checkpoint(output / "checkpoints"))
    finally:
        rollouts.close()
    seconds = time.perf_counter() - started
    model_dir = output / "model"
    trained = save_trained(trainer, trainer.processing_class, model_dir, merged_lora=settings.lora is not None)
    history = [{k: float(v) for k, v in entry.items() if isinstance(v, int | float)}
               for entry in trainer.state.log_history if "reward" in entry]
    if trainer.is_world_process_zero():
        write_student_card(model_dir, read_student_card(model_path).get("prompt_set"), {
            "settings": settings.model_dump(mode="json") | {"view": "bpe"}, "start": model_path, "games": games})
    return GRPOResult(model_dir=str(model_dir), games=games, steps=trainer.state.global_step, seconds=seconds,
                      parameters=sum(p.numel() for p in trained.parameters()), history=history)


def build_grpo_trainer(model_path: str, output_dir: str | Path, settings: GRPOSettings, rollouts: RolloutSource,
                       data_root: str | None = None) -> Any:
    """The trainer of :func:`train_grpo`, not yet trained (checkpoints under ``<output_dir>/checkpoints``)."""
    import datasets
    from transformers import AutoModelForCausalLM, AutoTokenizer

    games = training_games(settings, data_root)
    dataset = datasets.Dataset.from_list([{"prompt": [{"role": "user", "content": g}], "game_id": g} for g in games])
    tokenizer = AutoTokenizer.from_pretrained(model_path)
    model = AutoModelForCausalLM.from_pretrained(model_path, dtype="auto")
    # the launcher's world size (accelerate launch / torchrun set it); accelerate's state is set up by the config
    config = grpo_config(settings, Path(output_dir) / "checkpoints", int(os.environ.get("WORLD_SIZE", "1")))
    return _trainer_class()(model=model, reward_funcs=reward_functions(settings.reward), args=config,
                            train_dataset=dataset, processing_class=tokenizer,
                            peft_config=settings.lora.peft_config() if settings.lora is not None else None,
                            rollouts=rollouts, micro_batch_size=settings.per_device_train_batch_size,
                            repeats_at=settings.reward.repeats_at,
                            forced_tokens_in_loss=settings.forced_tokens_in_loss,
                            episode_level_loss=settings.episode_level_loss,
                            guided_wins_only=settings.guided_per_group > 0)


def grpo_config(settings: GRPOSettings, checkpoints: Path, processes: int = 1) -> Any:
    """TRL's config for one optimizer step per generation round: a dataset row is a game, a step's
    ``games_per_step × num_generations`` episodes are split evenly over the processes (TRL's
    ``per_device_train_batch_size`` counts *episodes* here), and the turn samples they produce are trained in
    micro-batches of ``settings.per_device_train_batch_size`` inside the step (not by TRL's accumulation)."""
    import torch
    from trl import GRPOConfig

    episodes = settings.games_per_step * settings.num_generations
    if episodes % processes:
        raise ValueError(f"{episodes} episodes per step (games_per_step × num_generations) cannot be split evenly "
                         f"over {processes} processes")
    vllm = settings.vllm_server_url is not None
    return GRPOConfig(
        output_dir=str(checkpoints), per_device_train_batch_size=episodes // processes, steps_per_generation=1,
        gradient_accumulation_steps=1, num_generations=settings.num_generations, num_train_epochs=settings.epochs,
        max_steps=settings.max_steps or -1, learning_rate=settings.learning_rate, beta=settings.beta,
        max_grad_norm=settings.max_grad_norm, max_completion_length=settings.max_new_tokens,
        temperature=settings.temperature, bf16=settings.bf16, use_cpu=not torch.cuda.is_available(),
        gradient_checkpointing=settings.gradient_checkpointing, scale_rewards=settings.scale_rewards,
        seed=settings.seed, logging_steps=settings.logging_steps, loss_type=settings.loss_type,
        save_strategy="steps" if settings.save_steps else "no", save_steps=settings.save_steps or 500,
        report_to="none", disable_tqdm=True, dataloader_pin_memory=False,
        reward_weights=[1.0] * len(reward_functions(settings.reward)),
        use_vllm=vllm, vllm_mode="server", vllm_server_base_url=settings.vllm_server_url,
        vllm_importance_sampling_correction=False,  # the rollouts' generator does not return sampling logprobs
    )


def rollout_engine(settings: GRPOSettings, bank: ExperienceBankData | None, data_root: str | None,
                   engine: str | None, prompt_set: str = "alfworld/bpe") -> RolloutEngine:
    """Episodes in the environment through the BPE harness, generated in-process or by the vLLM server."""
    run_settings = RunSettings(
        budget=StepBudget(max_steps=settings.episode_steps, meta_action_cost=settings.meta_action_cost),
        concurrency=settings.games_per_step * settings.num_generations, bank=bank or load_bank_file(SEED_BANK),
    )
    return RolloutEngine(
        load_prompt_set(prompt_set), run_settings,
        Sampling(max_new_tokens=settings.max_new_tokens, temperature=settings.temperature),
        data_root=data_root, engine=engine, vllm_server_url=settings.vllm_server_url,
        guided=settings.guided,
    )


