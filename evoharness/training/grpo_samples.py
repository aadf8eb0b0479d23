"""From played episodes to GRPO's training samples: group advantages, the guided-episode and episode-weighting
rules, one sample per turn, and the micro-batches a step trains in."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from trl.trainer.utils import nanstd, pad

from evoharness.training.grpo_config import LOSS_NORMALIZATION
from evoharness.training.rollout import Rollout, TurnTokens


def micro_batches(batch: dict[str, Any], size: int, count: int, loss_type: str, processes: int = 1
                  ) -> list[dict[str, Any]]:
    """``batch``'s turn samples in ``count`` micro-batches of exactly ``size`` rows, in order, every sample in
    exactly one; padding columns that a micro-batch does not use are cut. Rows past the samples are filler (one
    prompt token, no completion token, advantage 0: they add nothing to the loss): TRL's loss gathers per-row
    metrics across processes, so every process must run the same number of forwards of the same number of
    rows. Each micro-batch carries ``loss_weight``: the factor that makes the sum of the micro-batches' losses
    over all processes the loss of the whole batch (see ``LOSS_NORMALIZATION``)."""
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


def longest_first(batch: dict[str, Any]) -> dict[str, Any]:
    """``batch``'s turn samples reordered from the longest (prompt and completion tokens) to the shortest, so each
    micro-batch holds samples of similar length and little padding. Every sample stays in the batch once: the loss
    (a sum over samples, normalized over the whole batch) is the same up to float summation order."""
    n = batch["prompt_ids"].size(0)
    lengths = batch["prompt_mask"].sum(dim=1) + batch["completion_mask"].sum(dim=1)
    return _rows(batch, torch.argsort(lengths, descending=True, stable=True), n)


def trimmed_chunks(batch: dict[str, Any], size: int) -> list[tuple[slice, dict[str, Any]]]:
    """``batch``'s samples in consecutive chunks of at most ``size`` rows (the rows of :func:`micro_batches`), each
    with the padding columns none of its rows uses cut: (its rows, the chunk)."""
    n = batch["prompt_ids"].size(0)
    chunks = []
    for start in range(0, n, size):
        rows = slice(start, min(start + size, n))
        chunks.append((rows, _trim_padding(_rows(batch, torch.arange(rows.start, rows.stop), n))))
    return chunks


def whole_sequences(batch: dict[str, Any]) -> tuple[Any, Any]:
    """Each sample's prompt and completion as one sequence: (input ids, attention mask)."""
    return (torch.cat([batch["prompt_ids"], batch["completion_ids"]], dim=1),
            torch.cat([batch["prompt_mask"], batch["completion_mask"]], dim=1))


def _with_filler(chunk: dict[str, Any], template: dict[str, Any], count: int) -> dict[str, Any]:
    """``chunk`` with ``count`` filler rows appended: copies of ``template`` (one sample) reduced to its last
    prompt token, with no completion token and advantage 0."""
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
    KL estimate exp(ref - logp), without bound (docs/results.md, guided GRPO)."""
    return torch.where(guided & (advantages < 0), torch.zeros_like(advantages), advantages)


def turn_loss_tokens(turn: TurnTokens, choices_only: bool = False) -> int:
    """The completion tokens of ``turn`` that the loss scores (:func:`turn_samples`' ``loss_mask``)."""
    return sum(turn.choices) if choices_only and turn.choices is not None and turn.completion_ids \
        else len(turn.completion_ids)


def episode_loss_tokens(rollout: Rollout, choices_only: bool = False) -> int:
    """The completion tokens of ``rollout`` that the loss scores."""
    return sum(turn_loss_tokens(t, choices_only) for t in rollout.turns)


@dataclass(frozen=True)
class TrainedTurns:
    """The turn samples a step trains, and what the skipped ones add to the loss's normalizers."""

    samples: list[tuple[TurnTokens, float]]
    skipped_turns: int = 0
    skipped_loss_tokens: int = 0


def without_zero_advantage(samples: list[tuple[TurnTokens, float]], processes: int, choices_only: bool = False
                           ) -> TrainedTurns:
    """``samples`` less the turns whose advantage is exactly 0 (a guided episode's loss, a group whose rewards were
    all equal), with their count and scored tokens: where the loss is the advantage times a ratio and nothing else
    (no KL term, no entropy term), such a turn adds 0 to the loss and to every gradient, so leaving it out of the
    forward and backward passes changes nothing as long as the normalizers still count it. All are kept when fewer
    than ``processes`` would be left (every process must train at least one sample)."""
    kept = [s for s in samples if s[1] != 0.0]
    if len(kept) < processes:
        return TrainedTurns(samples)
    skipped = [t for t, a in samples if a == 0.0]
    return TrainedTurns(kept, len(skipped), sum(turn_loss_tokens(t, choices_only) for t in skipped))


def episode_weighted(advantages: Any, tokens: Any, mean_tokens: float) -> Any:
    """Advantages that make a token-normalized loss (Σ A·ratio over tokens / all tokens) the mean over episodes
    of each episode's token mean: each advantage times ``mean_tokens`` / its episode's scored ``tokens`` (an
    episode with none scored keeps 0)."""
    return torch.where(tokens > 0, advantages * mean_tokens / tokens.clamp(min=1), torch.zeros_like(advantages))


def episode_turns(played: list[Rollout], advantages: Any) -> list[tuple[TurnTokens, float]]:
    """Every turn of ``played``, in order, with the advantage of the trajectory it belongs to."""
    return [(turn, float(advantages[i])) for i, rollout in enumerate(played) for turn in rollout.turns]


def interleaved(episodes: int, processes: int, process: int) -> list[int]:
    """The positions in a step's batch of ``episodes`` that ``process`` plays: every ``processes``-th from its index,
    so each process plays a share of every group (groups are consecutive) and no process draws only the long
    games."""
    return list(range(process, episodes, processes))


def deal_by_tokens(lengths: list[int], processes: int) -> list[list[int]]:
    """Turn samples (by index) dealt to ``processes`` so each trains about the same number of tokens: the longest
    first, each to the process with the fewest tokens so far (the lowest index on a tie). Deterministic, so every
    process computes the same deal from the same gathered samples."""
    shares: list[list[int]] = [[] for _ in range(processes)]
    loads = [0] * processes
    for index in sorted(range(len(lengths)), key=lambda i: (-lengths[i], i)):
        target = min(range(processes), key=lambda p: (loads[p], p))
        shares[target].append(index)
        loads[target] += lengths[index]
    return shares


def turn_samples(samples: list[tuple[TurnTokens, float]], pad_id: int, choices_only: bool = False
                 ) -> dict[str, Any]:
    """One training sample per turn (:func:`episode_turns`): its prompt (left-padded) and completion (right-padded)
    ids with masks, and its trajectory's advantage. An empty completion is one masked-out pad token. With
    ``choices_only``, forced tokens stay in the completion (attended to) but out of the loss: TRL's
    ``tool_mask`` (its mask of completion tokens the model did not choose) keeps only ``TurnTokens.choices``."""
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
        "advantages": torch.tensor([a for _, a in samples], dtype=torch.float32),
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


