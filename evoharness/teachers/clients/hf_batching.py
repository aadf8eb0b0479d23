"""Batched generation for a local Hugging Face causal LM, shared by evaluation, relabelling and GRPO rollouts.

Episodes run concurrently on one event loop and each asks for one turn at a time. :class:`BatchGenerator` serves
them from a worker thread in one of two ways (``engine``):

* ``continuous`` (the default for a Qwen3 model, such as the students built here): one continuous batch
  (:mod:`.continuous`): a turn is prefilled as soon as a slot is free, every step decodes one token of every turn
  in flight against its own key/value cache, and a finished turn's slot is refilled at once, so the event loop
  steps environments while generation goes on. The action constraint is a precomputed mask, and the tokens it
  forces are taken without a model pass each (jump-forward).
* ``batch`` (the path before; any other architecture, and subclasses that run batches elsewhere): the requests
  waiting are run as one left-padded ``generate`` call, each completion handed back when the whole batch ends;
  requests with different sampling settings go to different batches.

``benchmarks/student_speed.py`` compares the two side by side.
"""

from __future__ import annotations

import asyncio
import atexit
import threading
import weakref
from collections import defaultdict, deque
from collections.abc import Sequence
from contextlib import nullcontext
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal

from evoharness.teachers.clients.constrained import TokenConstraint

Engine = Literal["continuous", "batch"]
IDLE_SECONDS = 2.0
"""A continuous worker thread with nothing to do for this long ends (the next request starts another)."""
_WITH_WORKERS: weakref.WeakValueDictionary[int, BatchGenerator] = weakref.WeakValueDictionary()
"""Generators that started a worker thread: each is stopped before the interpreter shuts down (:func:`_stop_workers`)."""


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
    constraint: TokenConstraint | None = None


@dataclass
class BatchGenerator:
    """``generate`` returns the completion ids of one prompt (cut after the end-of-turn token, if emitted)."""

    model: Any
    tokenizer: Any
    max_batch: int = 16  # rows per batch; the continuous engine's slots (turns in flight)
    seed: int | None = None
    engine: Engine = "continuous"  # falls back to "batch" where the model is not a Qwen3 (see continuous_ready)
    compute_dtype: str | None = None  # "bfloat16": decode in it (continuous: see Qwen3Runner; batch: autocast)
    jump_forward: bool = True  # continuous: take the tokens a constraint forces without a step each (.continuous)
    batch_sizes: list[int] = field(default_factory=list)  # every batch run (engine "batch"), for tests
    applies_constraints: ClassVar[bool] = True  # a row with a constraint only gets the tokens it allows
    _pending: dict[Sampling, list[_Request]] = field(default_factory=lambda: defaultdict(list))
    _draining: bool = False
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _queue: deque[Any] = field(default_factory=deque)  # continuous: rows waiting for a slot
    _wake: threading.Condition = field(default_factory=threading.Condition)
    _worker: threading.Thread | None = None
    _stopping: bool = False
    decoder_stats: list[Any] = field(default_factory=list)  # continuous: each decoder's DecoderStats

    def continuous_ready(self) -> bool:
        """Whether requests take the continuous engine: asked for, a model it reproduces (Qwen3), and this class's
        own ``run_batch`` (a subclass that runs batches elsewhere, such as a vLLM server, keeps the batch path)."""
        from evoharness.teachers.clients.fast_decode import Qwen3Runner

        return self.engine == "continuous" and type(self).run_batch is BatchGenerator.run_batch \
            and Qwen3Runner.supports(self.model)

    async def generate(self, prompt_ids: list[int], sampling: Sampling,
                       constraint: TokenConstraint | None = None) -> list[int]:
        """The completion of one prompt; ``constraint`` restricts its action to what the game accepts."""
        _check(sampling)
        future: asyncio.Future[list[int]] = asyncio.get_running_loop().create_future()
        if self.continuous_ready():
            self._enqueue(prompt_ids, sampling, constraint, future)
            return await future
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

    # -- continuous engine -----------------------------------------------------------------------------
    def _enqueue(self, prompt_ids: list[int], sampling: Sampling, constraint: TokenConstraint | None,
                 future: asyncio.Future[list[int]]) -> None:
        from evoharness.teachers.clients.continuous import Row

        loop = future.get_loop()

        def deliver(result: list[int] | BaseException) -> None:
            try:
                loop.call_soon_threadsafe(_settle, future, result)
            except RuntimeError:  # the episode's event loop has closed: nobody waits for this turn
                pass

        with self._wake:
            self._queue.append(Row.of(prompt_ids, sampling, deliver, constraint))
            if self._worker is None:
                self._worker = threading.Thread(target=self._serve, name="continuous-decoder", daemon=True)
                self._worker.start()
                _WITH_WORKERS[id(self)] = self
            self._wake.notify()

    def _decoder(self) -> Any:
        from evoharness.teachers.clients.continuous import ContinuousDecoder

        decoder = ContinuousDecoder(self.model, self.tokenizer.eos_token_id, self.max_batch, self.seed,
                                    self.compute_dtype, self.jump_forward)
        self.decoder_stats.append(decoder.stats)
        return decoder

    def _serve(self) -> None:
        """The worker thread: admit waiting rows into free slots, step, repeat; end after IDLE_SECONDS idle."""
        import torch

        decoder = self._decoder()
        while True:
            with self._wake:
                while not self._queue and not decoder.rows:
                    if self._stopping or (not self._wake.wait(timeout=IDLE_SECONDS) and not self._queue):
                        del decoder  # its tensors freed before the thread counts as ended (see stop_worker)
                        self._worker = None
                        return
                admitted = [self._queue.popleft() for _ in range(min(decoder.free, len(self._queue)))]
            try:
                with self._lock, torch.no_grad():
                    decoder.admit(admitted)
                    decoder.step()
            except Exception as exc:  # noqa: BLE001 - not swallowed: every row in flight gets it
                decoder.fail(exc, admitted)

    def stop_worker(self) -> None:
        """End the worker thread once the turns in flight are delivered, and wait for it. A daemon thread that frees
        tensors while the interpreter shuts down aborts the process ("terminate called without an active
        exception": torch releases the GIL to free them and the thread is unwound when it takes it back), so every
        worker is stopped at exit, and a worker frees its decoder before it counts as ended."""
        with self._wake:
            worker, self._stopping = self._worker, True
            self._wake.notify()
        if worker is not None:
            worker.join()
        with self._wake:
            self._stopping = False

    def run_batch(self, prompts: list[list[int]], sampling: Sampling,
                  constraints: Sequence[TokenConstraint | None] | None = None) -> list[list[int]]:
        """The completions of ``prompts`` (without padding, ended by the end-of-turn token if emitted), decoded
        together; a row with a constraint only ever gets the tokens it allows."""
        _check(sampling)
        if self.continuous_ready():
            return self._run_continuous(prompts, sampling, constraints)
        return self._run_padded(prompts, sampling, constraints)

    def _run_continuous(self, prompts: list[list[int]], sampling: Sampling,
                        constraints: Sequence[TokenConstraint | None] | None) -> list[list[int]]:
        import torch

        from evoharness.teachers.clients.continuous import Row

        results: list[list[int] | BaseException | None] = [None] * len(prompts)

        def deliver_to(index: int) -> Any:
            return lambda result: results.__setitem__(index, result)

        waiting = deque(Row.of(p, sampling, deliver_to(i), (constraints or [None] * len(prompts))[i])
                        for i, p in enumerate(prompts))
        with self._lock, torch.no_grad():
            decoder = self._decoder()
            while waiting or decoder.rows:
                decoder.admit([waiting.popleft() for _ in range(min(decoder.free, len(waiting)))])
                decoder.step()
        for result in results:
            if isinstance(result, BaseException):
                raise result
        return [list(r) for r in results if isinstance(r, list)]

    # -- batch engine (the path before) ---------------------------------------------------------------
    def _run_padded(self, prompts: list[list[int]], sampling: Sampling,
                    constraints: Sequence[TokenConstraint | None] | None = None) -> list[list[int]]:
        """One left-padded ``generate`` over ``prompts``; the completions without padding. A row with a
        constraint only ever gets the tokens it allows."""
        import torch

        from evoharness.teachers.clients.fast_decode import torch_dtype

        pad_id = self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else self.tokenizer.eos_token_id
        eos = self.tokenizer.eos_token_id
        width = max(len(p) for p in prompts)
        input_ids = torch.tensor([[pad_id] * (width - len(p)) + p for p in prompts], device=self.model.device)
        attention = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompts], device=self.model.device)
        sample = bool(sampling.temperature)
        precision = nullcontext() if self.compute_dtype is None else \
            torch.autocast(self.model.device.type, dtype=torch_dtype(self.compute_dtype))
        with self._lock, torch.no_grad(), precision:
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


def _check(sampling: Sampling) -> None:
    if sampling.max_new_tokens < 1:
        raise ValueError(f"max_new_tokens must be at least 1 (got {sampling.max_new_tokens})")


def _settle(future: asyncio.Future[list[int]], result: list[int] | BaseException) -> None:
    if future.done():
        return
    if isinstance(result, BaseException):
        future.set_exception(result)
    else:
        future.set_result(result)


def _allowed_tokens(constraints: Sequence[TokenConstraint | None] | None, width: int, eos: int,
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


@atexit.register
def _stop_workers() -> None:
    """Stop every live generator's worker thread before the interpreter shuts down (see ``stop_worker``)."""
    for generator in list(_WITH_WORKERS.values()):
        generator.stop_worker()
