"""Ready-made responders for :class:`~evoharness.testing.loopback.LoopbackServer`: scripts and faults."""

from __future__ import annotations

import random
import threading
import time
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field, replace

from evoharness.testing.loopback import Call, Reply, Responder

FAULTS: tuple[str, ...] = (
    "429", "500", "529", "timeout", "truncate", "reset", "malformed_body", "garbage", "empty", "refusal",
)


class Scripted:
    """Answers with ``replies`` in order, then with ``then`` (or repeats the last reply)."""

    def __init__(self, replies: Iterable[Reply], then: Responder | None = None) -> None:
        self._replies = list(replies)
        self._then = then
        self._lock = threading.Lock()
        self.served = 0

    def __call__(self, call: Call) -> Reply:
        with self._lock:
            index = self.served
            self.served += 1
        if index < len(self._replies):
            return self._replies[index]
        if self._then is not None:
            return self._then(call)
        return self._replies[-1]


def constant(text: str) -> Responder:
    """Always the same answer."""
    return lambda call: Reply(text=text)


@dataclass
class FaultInjector:
    """Wraps ``inner``: each call fails with probability ``rate``, with a fault drawn from ``faults``.

    Transport faults (429 with retry-after, 5xx, timeouts, truncated bodies, resets, malformed JSON) test
    the client's retries; output faults (garbage text, empty answer, refusal) test invalid-turn handling.
    ``timeout_s`` must exceed the client's timeout for ``timeout`` faults to time out.
    """

    inner: Responder
    rate: float = 0.2
    seed: int = 0
    faults: tuple[str, ...] = FAULTS
    retry_after_s: float = 0.05
    timeout_s: float = 2.0
    injected: Counter[str] = field(default_factory=Counter)

    def __post_init__(self) -> None:
        unknown = set(self.faults) - set(FAULTS)
        if unknown:
            raise ValueError(f"unknown faults {sorted(unknown)}; known: {FAULTS}")
        self._rng = random.Random(self.seed)
        self._lock = threading.Lock()

    def __call__(self, call: Call) -> Reply:
        with self._lock:
            fault = self._rng.choice(self.faults) if self._rng.random() < self.rate else None
            self.injected[fault or "none"] += 1
        if fault is None:
            return self.inner(call)
        return self.fault_reply(fault, call)

    def fault_reply(self, fault: str, call: Call) -> Reply:
        if fault == "429":
            return Reply(status=429, text="rate limited", headers={"retry-after": str(self.retry_after_s)})
        if fault in ("500", "529"):
            return Reply(status=int(fault), text="internal error")
        if fault == "timeout":
            return replace(self.inner(call), delay_s=self.timeout_s)
        if fault == "truncate":
            return replace(self.inner(call), truncate=True)
        if fault == "reset":
            return Reply(reset=True)
        if fault == "malformed_body":
            return Reply(body='{"id": "x", "choices": [{"message": ')
        if fault == "garbage":
            return Reply(text="Let me think about what to do next...")
        if fault == "empty":
            return Reply(text="")
        return Reply(text="I can't help with that.", stop_reason="refusal")


class ConcurrencyProbe:
    """Wraps ``inner``, holds each call for ``hold_s`` and records how many calls were in flight at most."""

    def __init__(self, inner: Responder, hold_s: float = 0.05) -> None:
        self.inner, self.hold_s = inner, hold_s
        self.in_flight = self.max_in_flight = 0
        self._lock = threading.Lock()

    def __call__(self, call: Call) -> Reply:
        with self._lock:
            self.in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self.in_flight)
        try:
            time.sleep(self.hold_s)
            return self.inner(call)
        finally:
            with self._lock:
                self.in_flight -= 1
