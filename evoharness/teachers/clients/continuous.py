"""Continuous batching over a slot key/value cache: a finished completion's slot is refilled at once.

:class:`ContinuousDecoder` holds up to ``slots`` completions in flight. :meth:`~ContinuousDecoder.admit` prefills
new prompts into free slots (packed, no padding; the prompt prefix every request so far shared is copied from a
cache instead of recomputed), and :meth:`~ContinuousDecoder.step` picks every row's next token (masked by its
action constraint, greedy or sampled), hands back the rows that ended and decodes one token for the others. Where
the constraint allows a single next token (``</action>`` after a complete command, the fixed text between the thought
and the action), that token is taken without asking the model, and a row's run of such tokens goes through the model
in the same pass as the other rows' next tokens (jump-forward decoding: 35–40 % fewer passes, measured in
``benchmarks/results/jump_forward.json``). Greedy rows pick the same tokens as ``generate`` up to floating-point
summation order (``benchmarks/student_speed.py`` checks the decisions on held-out turns); sampled rows draw from the
same distribution, though not the same random numbers as a decoder that samples forced tokens.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import torch

from evoharness.teachers.clients.constrained import ConstraintWalk, TokenConstraint
from evoharness.teachers.clients.fast_decode import DecodeState, Qwen3Runner

if TYPE_CHECKING:
    from evoharness.teachers.clients.hf_batching import Sampling

Delivery = Callable[[list[int] | BaseException], None]


@dataclass
class Row:
    """One completion in flight: its prompt, how it decodes, and where its result goes."""

    prompt: list[int]
    sampling: Sampling
    deliver: Delivery
    constraint: ConstraintWalk | None = None
    tokens: list[int] = field(default_factory=list)

    @classmethod
    def of(cls, prompt: list[int], sampling: Sampling, deliver: Delivery,
           constraint: TokenConstraint | None) -> Row:
        return cls(list(prompt), sampling, deliver, constraint.start() if constraint is not None else None)


@dataclass
class DecoderStats:
    """What a decoder did: prompt tokens prefilled (and taken from the prefix cache), tokens decoded, steps."""

    prefilled: int = 0
    prefix_reused: int = 0
    decoded: int = 0
    steps: int = 0
    forced: int = 0  # tokens taken because the constraint allowed nothing else, without a step of their own
    rows_per_step: list[int] = field(default_factory=list)


class ContinuousDecoder:
    """Up to ``slots`` completions of ``model`` (a :meth:`Qwen3Runner.supports` model) decoded together, computed in
    ``compute_dtype`` (see :class:`Qwen3Runner`; None: the weights as stored)."""

    def __init__(self, model: Any, eos: int, slots: int, seed: int | None = None,
                 compute_dtype: str | None = None, jump_forward: bool = True) -> None:
        self.runner, self.eos, self.slots = Qwen3Runner(model, compute_dtype), eos, slots
        self.jump_forward = jump_forward
        self.state = DecodeState.empty(self.runner, slots + 1, 512)  # the last slot holds the shared prefix
        self.rows: list[Row] = []
        self.logits: torch.Tensor | None = None  # [rows, vocab]: the next token's logits of every row
        self.prefix: list[int] | None = None  # the prompt prefix every request so far began with
        self.stats = DecoderStats()
        self.random = torch.Generator(device=self.runner.device)
        if seed is not None:
            self.random.manual_seed(seed)

    @property
    def free(self) -> int:
        return self.slots - len(self.rows)

    def admit(self, rows: list[Row]) -> None:
        """Prefill ``rows`` (at most :attr:`free`) into the next free slots; their first logits join the batch."""
        if not rows:
            return
        if len(rows) > self.free:
            raise ValueError(f"{len(rows)} rows for {self.free} free slots")
        self.state.reserve(max(len(r.prompt) + r.sampling.max_new_tokens for r in rows) + 1)
        slots = list(range(len(self.rows), len(self.rows) + len(rows)))
        starts = [self._reuse_prefix(row.prompt, slot) for row, slot in zip(rows, slots, strict=True)]
        logits = self.runner.prefill(self.state, slots, [r.prompt for r in rows], starts)
        if self.prefix is None:  # the first prompt seeds the prefix cache; later prompts only shorten it
            self.prefix = list(rows[0].prompt)
            self.state.copy_prefix(slots[0], self.slots, len(self.prefix))
        self.stats.prefilled += sum(len(r.prompt) - s for r, s in zip(rows, starts, strict=True))
        self.stats.prefix_reused += sum(starts)
        self.rows.extend(rows)
        self.logits = logits if self.logits is None else torch.cat([self.logits, logits])

    def _reuse_prefix(self, prompt: list[int], slot: int) -> int:
        """Copy the cached shared prefix into ``slot`` when ``prompt`` starts with it; the tokens left to prefill
        start at the returned position. The prefix shrinks to what this prompt shares (its keys and values
        depend only on the tokens before them, so the shorter cache stays valid)."""
        if self.prefix is None:
            return 0
        shared = 0
        for a, b in zip(self.prefix, prompt, strict=False):
            if a != b:
                break
            shared += 1
        del self.prefix[shared:]
        start = min(shared, len(prompt) - 1)  # at least one token is prefilled: it gives the first logits
        if start > 0:
            self.state.copy_prefix(self.slots, slot, start)
        return start

    def step(self) -> None:
        """Pick each row's next token (then, with :attr:`jump_forward`, every token its constraint forces after it),
        deliver the rows that ended, and run the new tokens of the rest through the model in one pass."""
        if not self.rows or self.logits is None:
            return
        chosen = self._choose(self.logits)
        self.stats.steps += 1
        self.stats.rows_per_step.append(len(self.rows))
        taken = [self._take(row, token) for row, token in zip(self.rows, chosen, strict=True)]
        ended = [i for i, row in enumerate(self.rows)
                 if row.tokens[-1] == self.eos or len(row.tokens) >= row.sampling.max_new_tokens]
        for index in reversed(ended):  # keep the active slots 0..n-1: the last row moves into the hole
            row, last = self.rows[index], len(self.rows) - 1
            if index != last:
                self.state.move(last, index)
                self.rows[index], taken[index] = self.rows[last], taken[last]
            self.rows.pop()
            taken.pop()
            row.deliver(row.tokens)
        self.logits = None
        if self.rows:
            self.logits = self.runner.extend(self.state, taken)
            self.stats.decoded += sum(len(t) for t in taken)

    def _take(self, row: Row, token: int) -> list[int]:
        """Append ``token`` to ``row`` and, with :attr:`jump_forward`, each next token its constraint forces (the
        only one allowed: greedy and sampled decoding would pick it whatever the logits), until the row ends or a
        choice is left; the tokens appended."""
        taken = []
        while True:
            taken.append(token)
            row.tokens.append(token)
            if row.constraint is not None:
                row.constraint.advance(token)
            if token == self.eos or len(row.tokens) >= row.sampling.max_new_tokens or row.constraint is None \
                    or not self.jump_forward or (forced := row.constraint.forced()) is None:
                return taken
            token = forced
            self.stats.forced += 1

    def fail(self, error: BaseException, also: list[Row] | None = None) -> None:
        """Deliver ``error`` to every row in flight (and to ``also``) and start empty."""
        for row in [*self.rows, *(also or [])]:
            row.deliver(error)
        self.rows, self.logits = [], None

    def _choose(self, logits: torch.Tensor) -> list[int]:
        """Each row's next token: its constraint's mask applied, then the argmax (greedy) or a sample."""
        width = logits.shape[-1]
        if any(r.constraint is not None for r in self.rows):
            none = torch.zeros(width, dtype=torch.bool)
            blocked = torch.stack([r.constraint.blocked(width) if r.constraint is not None else none
                                   for r in self.rows])
            logits = logits.masked_fill(blocked.to(logits.device), float("-inf"))
        chosen = logits.argmax(dim=-1).tolist()
        sampled: dict[tuple[float, float], list[int]] = {}
        for index, row in enumerate(self.rows):
            if row.sampling.temperature:
                sampled.setdefault((row.sampling.temperature, row.sampling.top_p), []).append(index)
        for (temperature, top_p), indices in sampled.items():
            scores = _top_p(logits[indices].float() / temperature, top_p)
            picks = torch.multinomial(scores.softmax(dim=-1), 1, generator=self.random).view(-1).tolist()
            for index, token in zip(indices, picks, strict=True):
                chosen[index] = token
        return chosen


def _top_p(scores: torch.Tensor, top_p: float) -> torch.Tensor:
    """Nucleus filtering as ``transformers``' ``TopPLogitsWarper`` does it (the most likely token always stays)."""
    if top_p >= 1.0:
        return scores
    ordered, order = torch.sort(scores, descending=False)
    cumulative = ordered.softmax(dim=-1).cumsum(dim=-1)
    remove = cumulative <= (1 - top_p)
    remove[..., -1:] = False
    return scores.masked_fill(remove.scatter(1, order, remove), float("-inf"))
