"""Micro-batched generation for a local Hugging Face causal LM.

Episodes run concurrently on one event loop and each asks for one turn at a time. Instead of generating
those turns one after another, :class:`BatchGenerator` collects the requests that are waiting, runs them
as one left-padded ``generate`` call in a worker thread, and hands each episode its own completion; while a
batch runs, the next one fills up. Requests with different sampling settings go to different batches.
"""

from __future__ import annotations

import asyncio
import threading
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any, ClassVar

from evoharness.teachers.clients.constrained import ActionConstraint


@dataclass(frozen=True)
class Sampling:
    """How a request is decoded; requests batch together only when these agree. ``temperature`` None: greedy."""

    max_new_tokens: int
    temperature: float | None = None
    top_p: float = 1.0


@dataclass
class _Request:
    prompt_ids: list[int]
    future: asyncio.Future[list[int]]
    constraint: ActionConstraint | None = None


@dataclass
class BatchGenerator:
    """``generate`` returns the completion ids of one prompt (cut after the end-of-turn token, if emitted)."""

    model: Any
    tokenizer: Any
    max_batch: int = 16
    seed: int | None = None
    batch_sizes: list[int] = field(default_factory=list)  # every batch run, for tests and benchmarks
    applies_constraints: ClassVar[bool] = True  # a row with a constraint only gets the tokens it allows
    _pending: dict[Sampling, list[_Request]] = field(default_factory=lambda: defaultdict(list))
    _draining: bool = False
    _lock: threading.Lock = field(default_factory=threading.Lock)

    async def generate(self, prompt_ids: list[int], sampling: Sampling,
                       constraint: ActionConstraint | None = None) -> list[int]:
        """The completion of one prompt; ``constraint`` restricts its action to what the game accepts."""
        future: asyncio.Future[list[int]] = asyncio.get_running_loop().create_future()
        self._pending[sampling].append(_Request(list(prompt_ids), future, constraint))
        if not self._draining:
            self._draining = True
            asyncio.get_running_loop().create_task(self._drain())
        return await future

    async def _drain(self) -> None:
        try:
            while self._pending:
                await self._let_ready_episodes_enqueue()
                sampling = next(iter(self._pending))
                queue = self._pending[sampling]
                batch, rest = queue[:self.max_batch], queue[self.max_batch:]
                if rest:
                    self._pending[sampling] = rest
                else:
                    del self._pending[sampling]
                try:
                    results = await asyncio.to_thread(self.run_batch, [r.prompt_ids for r in batch], sampling,
                                                      [r.constraint for r in batch])
                except Exception as exc:  # noqa: BLE001 - not swallowed: every waiting episode gets it
                    for request in batch:
                        if not request.future.done():
                            request.future.set_exception(exc)
                    continue
                for request, result in zip(batch, results, strict=True):
                    if not request.future.done():
                        request.future.set_result(result)
        finally:
            self._draining = False

    async def _let_ready_episodes_enqueue(self) -> None:
        """Yield to the event loop until no new request arrives in one pass."""
        seen = -1
        while (waiting := sum(len(q) for q in self._pending.values())) != seen:
            seen = waiting
            await asyncio.sleep(0)

    def run_batch(self, prompts: list[list[int]], sampling: Sampling,
                  constraints: list[ActionConstraint | None] | None = None) -> list[list[int]]:
        """One left-padded ``generate`` over ``prompts``; the completions without padding. A row with a
        constraint only ever gets the tokens it allows."""
        import torch

        pad_id = self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else self.tokenizer.eos_token_id
        eos = self.tokenizer.eos_token_id
        width = max(len(p) for p in prompts)
        input_ids = torch.tensor([[pad_id] * (width - len(p)) + p for p in prompts], device=self.model.device)
        attention = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompts], device=self.model.device)
        sample = bool(sampling.temperature)
        with self._lock, torch.no_grad():
            if self.seed is not None:
                torch.manual_seed(self.seed)
            out = self.model.generate(
                input_ids=input_ids, attention_mask=attention, max_new_tokens=sampling.max_new_tokens,
                do_sample=sample, temperature=sampling.temperature if sample else None,
                top_p=sampling.top_p if sample else None, top_k=None, eos_token_id=eos, pad_token_id=pad_id,
                prefix_allowed_tokens_fn=_allowed_tokens(constraints, width, eos, self.model.config.vocab_size),
            )
        self.batch_sizes.append(len(prompts))
        completions = []
        for row in out[:, width:].tolist():  # rows that ended early are padded after their end-of-turn token
            completions.append(row[:row.index(eos) + 1] if eos in row else row)
        return completions


def _allowed_tokens(constraints: list[ActionConstraint | None] | None, width: int, eos: int,
                    vocab_size: int) -> Any:
    """``generate``'s ``prefix_allowed_tokens_fn`` for per-row constraints (None: no row is constrained)."""
    if not constraints or all(c is None for c in constraints):
        return None
    everything = list(range(vocab_size))

    def allowed(row: int, input_ids: Any) -> list[int]:
        constraint = constraints[row]
        if constraint is None:
            return everything
        generated = input_ids[width:].tolist()
        return [eos] if eos in generated else constraint.allowed(generated)

    return allowed
