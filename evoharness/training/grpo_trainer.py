"""``EpisodeGRPOTrainer``: TRL's ``GRPOTrainer`` whose generation step plays whole episodes in the environment and
emits one training sample per turn (TRL's ``grpo_trainer`` beside :mod:`evoharness.training.grpo_config`).

Each optimizer step plays ``games_per_step`` train games × ``num_generations`` episodes with the current model,
scores every trajectory with the reward terms of :mod:`evoharness.training.reward` (TRL reward functions, each logged
separately), normalizes rewards within each game's group, and trains on every *turn* as its own sample carrying its
trajectory's advantage: the prompt is rebuilt every turn, so a turn's tokens are scored under exactly the prompt the
model saw when it wrote them. Only ``_generate_and_score_completions`` and ``training_step`` are replaced; TRL's loss
(clipped ratio, KL to the reference with β), optimizer, scheduler, logging and checkpointing are used unchanged.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Sequence
from typing import Any, Literal, Protocol

import torch
from accelerate.utils import DistributedType, gather_object
from trl import GRPOTrainer
from trl.models.utils import unwrap_model_for_generation
from trl.trainer.utils import nanstd, use_adapter

from evoharness.training.grpo_config import LOSS_NORMALIZATION
from evoharness.training.grpo_samples import (
    TrainedTurns,
    deal_by_tokens,
    episode_loss_tokens,
    episode_turns,
    episode_weighted,
    group_advantages,
    interleaved,
    longest_first,
    loss_mask,
    micro_batches,
    trimmed_chunks,
    turn_samples,
    whole_sequences,
    wins_only_when_guided,
    without_zero_advantage,
)
from evoharness.training.reward import TrajectoryStats
from evoharness.training.rollout import Rollout
from evoharness.training.trl_contract import require_trl_contract

require_trl_contract()

Layout = Literal["balanced", "contiguous"]

ADVANTAGE_SCALED_LOSSES = frozenset({"dapo", "bnpo", "grpo", "dr_grpo", "cispo", "sapo", "luspo"})
"""TRL loss types whose per-token loss is the advantage times a function of the probability ratio (before the
KL and entropy terms): a turn with advantage 0 adds 0 to them."""


class RolloutSource(Protocol):
    """What GRPO plays episodes with: :class:`RolloutEngine`, or recorded rollouts replayed
    (:class:`evoharness.training.fixed_rollouts.FixedRollouts`)."""

    def play(self, game_ids: list[str], model: Any, tokenizer: Any, round_id: int,
             positions: Sequence[int] | None = None) -> list[Rollout]: ...

    def close(self) -> None: ...


_TRLTrainer: Any = GRPOTrainer  # typed as Any: TRL sets many of its attributes dynamically


class EpisodeGRPOTrainer(_TRLTrainer):
    """``GRPOTrainer`` whose generation step plays whole episodes and emits one sample per turn, trained in
    micro-batches of at most ``micro_batch_size`` turns with gradients accumulated across them."""

    def __init__(self, *args: Any, rollouts: RolloutSource, micro_batch_size: int,
                 repeats_at: str = "environment", with_progress: bool = False, forced_tokens_in_loss: bool = False,
                 episode_level_loss: bool = False, guided_wins_only: bool = False, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.repeats_at, self.with_progress = repeats_at, with_progress
        self.forced_tokens_in_loss = forced_tokens_in_loss
        self.episode_level_loss, self.guided_wins_only = episode_level_loss, guided_wins_only
        if self.loss_type not in LOSS_NORMALIZATION:
            raise ValueError(f"loss_type {self.loss_type!r} is not supported by the per-turn micro-batching "
                             f"(supported: {sorted(LOSS_NORMALIZATION)})")
        self.rollouts, self.micro_batch_size = rollouts, micro_batch_size
        self.turn_log: list[dict[str, Any]] = []  # per round: this process's (episode index, turns, advantage)

    layout: Layout = "balanced"
    """How a step's work is split over processes. ``balanced``: each process plays every n-th episode of the step
    (a share of every group), and the turns are then dealt so each trains about the same tokens; ``contiguous``:
    TRL's slices, each process trains its own episodes' turns (the layout before; ``benchmarks/grpo_balance.py``
    compares them). The loss and update are the same either way."""

    # -- generation: whole episodes, one sample per turn ------------------------------------------------
    def _generate_and_score_completions(self, inputs: list[dict[str, Any]]) -> dict[str, Any]:
        device = self.accelerator.device
        mode = "train" if self.model.training else "eval"
        processes, rank = self.accelerator.num_processes, self.accelerator.process_index
        step = gather_object(list(inputs)) if processes > 1 else list(inputs)  # the step's batch, in order
        positions = self._positions(len(step), rank)
        inputs = [step[p] for p in positions]
        round_id = self.state.global_step
        if self.use_vllm and round_id != getattr(self, "_last_loaded_step", -1):
            self.vllm_generation.sync_weights()  # every process takes part; the server gets the new weights
            self._last_loaded_step = round_id
        started = time.perf_counter()
        with unwrap_model_for_generation(self.model_wrapped, self.accelerator,
                                         gather_deepspeed3_params=self.args.ds3_gather_for_generation) as model:
            played = self.rollouts.play([row["game_id"] for row in inputs], model, self.processing_class,
                                        round_id, positions=positions)
        self._metrics[mode]["time/rollout_seconds"].append(time.perf_counter() - started)
        stats = [TrajectoryStats.from_record(r.record, self.repeats_at, self.with_progress) for r in played]
        rows = [row | {"trajectory": s.as_dict()} for row, s in zip(inputs, stats, strict=True)]
        completions = [[{"role": "assistant", "content": r.record.steps[-1].raw_output if r.record.steps else ""}]
                       for r in played]
        last_turns = [r.turns[-1].completion_ids if r.turns else [] for r in played]
        # gathered over every process in process order: put back in the step's order, as groups are normalized
        # there (a group's episodes are played by several processes)
        per_func = self._calculate_rewards(rows, [row["prompt"] for row in inputs], completions, last_turns)
        gathered = [p for q in range(processes) for p in self._positions(len(step), q)]
        per_func = per_func[torch.argsort(torch.tensor(gathered, device=per_func.device))]
        rewards = (per_func * self.reward_weights.to(device).unsqueeze(0)).nansum(dim=1)
        advantages = group_advantages(rewards, self.num_generations, self.scale_rewards)
        local = advantages[torch.tensor(positions, device=advantages.device)]
        if self.guided_wins_only:
            local = wins_only_when_guided(local, torch.tensor([r.guided for r in played], device=device))
        self.turn_log.append({"round": round_id, "episodes": [
            {"index": position, "game_id": row["game_id"], "turns": len(r.turns), "advantage": float(a)}
            for position, row, r, a in zip(positions, inputs, played, local.tolist(), strict=True)]})
        self._log_round(mode, per_func, rewards, stats, played)
        return self._turn_samples(played, local, device)

    def _positions(self, episodes: int, process: int) -> list[int]:
        """The positions in the step's batch of ``episodes`` that ``process`` plays (see ``layout``)."""
        processes = self.accelerator.num_processes
        if self.layout == "balanced":
            return interleaved(episodes, processes, process)
        share = episodes // processes  # TRL's process slice
        return list(range(process * share, (process + 1) * share))

    def _turn_samples(self, played: list[Rollout], advantages: torch.Tensor, device: Any) -> dict[str, Any]:
        choices_only = not self.forced_tokens_in_loss
        if self.episode_level_loss:
            tokens = torch.tensor([float(episode_loss_tokens(r, choices_only)) for r in played], device=device)
            # the mean over every process's episodes, as the loss normalizes over every process's tokens
            total = self.accelerator.gather(torch.stack([tokens.sum(), torch.tensor(float(len(played)),
                                                                                      device=device)]).unsqueeze(0))
            mean = float(total[:, 0].sum() / total[:, 1].sum())
            advantages = episode_weighted(advantages.to(device), tokens, mean)
        samples = episode_turns(played, advantages)
        processes = self.accelerator.num_processes
        dealt = processes == 1 or self.layout == "balanced"  # every process sees the whole step's samples
        if processes > 1 and dealt:
            samples = gather_object(samples)
        trained = without_zero_advantage(samples, processes, choices_only) \
            if dealt and self.zero_advantage_trains_nothing else TrainedTurns(samples)
        samples = trained.samples
        if processes > 1 and dealt:  # every process trains about the same number of tokens
            shares = deal_by_tokens([len(t.prompt_ids) + len(t.completion_ids) for t, _ in samples], processes)
            samples = [samples[i] for i in shares[self.accelerator.process_index]]
        output = {k: v.to(device) if isinstance(v, torch.Tensor) else v
                  for k, v in longest_first(turn_samples(samples, self.processing_class.pad_token_id,
                                                         choices_only=choices_only)).items()}
        # every process needs the global counts: the loss normalizes over all processes' turns and tokens,
        # and all processes must run the same number of micro-batches (TRL's loss logs with collectives)
        real_tokens = int(output["prompt_mask"].sum() + output["completion_mask"].sum())
        local = torch.tensor([output["prompt_ids"].size(0), int(loss_mask(output).sum()), real_tokens], device=device)
        counts = self.accelerator.gather(local.unsqueeze(0)).view(-1, 3)
        # the normalizers count the skipped turns too: the loss is the same as if they had been trained
        output["num_items_in_batch"] = counts[:, 1].sum() + trained.skipped_loss_tokens
        output["global_turns"] = counts[:, 0].sum() + trained.skipped_turns
        output["micro_batches"] = torch.ceil(counts[:, 0].max() / self.micro_batch_size).long()
        started = time.perf_counter()
        with torch.no_grad():
            if self.args.gradient_accumulation_steps % (self.args.steps_per_generation * self.num_iterations):
                output["old_per_token_logps"] = self._chunked_logps(output)
            if self.beta != 0.0:
                output["ref_per_token_logps"] = self._chunked_logps(output, reference=True)
        metrics = self._metrics["train" if self.model.training else "eval"]
        metrics["time/scoring_seconds"].append(time.perf_counter() - started)
        metrics["samples/turns"].append(float(output["global_turns"]))
        metrics["samples/turns_trained"].append(float(counts[:, 0].sum()))
        metrics["samples/micro_batches"].append(float(output["micro_batches"]))
        # the process with the most tokens sets the step's pace: 1.0 is an even split
        metrics["samples/token_imbalance"].append(float(counts[:, 2].max() / counts[:, 2].float().mean()))
        return output

    def _chunked_logps(self, batch: dict[str, Any], reference: bool = False) -> torch.Tensor:
        """Per-token log-probabilities of every sample's completion under the policy (or the KL reference: its
        copy, or the policy with its LoRA adapter off), in the micro-batches' row chunks with each chunk's unused
        padding cut (the loss reads the same columns); zero past a chunk's width."""
        model = self.ref_model if reference and self.ref_model is not None else self.model
        adapter: Any = contextlib.nullcontext()
        if reference and self.ref_model is None:
            unwrapped = self.accelerator.unwrap_model(self.model)
            adapter = use_adapter(unwrapped, adapter_name="ref" if "ref" in unwrapped.peft_config else None)
        logps = torch.zeros(batch["completion_ids"].shape, device=batch["completion_ids"].device)
        with adapter:
            for rows, chunk in trimmed_chunks(batch, self.micro_batch_size):
                keep = chunk["completion_ids"].size(1)
                logps[rows, :keep] = self._get_per_token_logps_and_entropies(
                    model, *whole_sequences(chunk), keep, batch_size=self.micro_batch_size)[0]
        return logps

    # -- training: every turn once per iteration, in bounded micro-batches --------------------------------
    def training_step(self, model: Any, inputs: Any, num_items_in_batch: Any = None) -> torch.Tensor:
        """One optimizer step's forward and backward passes: the step's turn samples (generated on the first
        call of an iteration, then buffered by TRL) in micro-batches; gradients accumulate across them and
        are synchronized across processes on the last one."""

        model.train()
        batch = self._prepare_inputs(inputs)
        started = time.perf_counter()
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
        self._metrics["train"]["time/train_seconds"].append(time.perf_counter() - started)
        self._step += 1
        return total

    @property
    def zero_advantage_trains_nothing(self) -> bool:
        """Whether a turn whose advantage is 0 adds nothing to the loss: no KL term (β = 0), no entropy term or
        entropy mask, and a loss that is the advantage times a ratio. Then such turns are not trained (their count
        stays in the normalizers), which saves their forward and backward passes."""
        return (self.beta == 0.0 and self.top_entropy_quantile == 1.0 and self.args.entropy_coef == 0.0
                and not self.args.use_adaptive_entropy and self.loss_type in ADVANTAGE_SCALED_LOSSES)

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
