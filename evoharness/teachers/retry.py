"""Retries with exponential backoff and jitter, honouring the server's ``retry-after``.

One :class:`Cooldown` is shared by all calls of a teacher: a 429 with ``retry-after`` pauses every call
of that teacher, not only the one that got it, so a burst of in-flight episodes does not hammer the API.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

from pydantic import BaseModel, ConfigDict, Field

from evoharness.teachers.clients.base import TransientError

logger = logging.getLogger(__name__)
T = TypeVar("T")
Sleep = Callable[[float], Awaitable[None]]


class RetryConfig(BaseModel):
    """How hard a teacher tries before an episode fails. Delays are in seconds."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    max_attempts: int = Field(default=6, ge=1, description="Attempts per call, the first included.")
    base_delay_s: float = Field(default=1.0, ge=0, description="Backoff before the 2nd attempt; doubles after.")
    max_delay_s: float = Field(default=30.0, ge=0, description="Cap of the exponential backoff.")
    jitter: float = Field(default=0.5, ge=0, le=1, description="Fraction of a backoff delay drawn at random.")
    max_retry_after_s: float = Field(default=120.0, ge=0, description="Cap on a server's retry-after.")
    timeout_s: float = Field(default=60.0, gt=0, description="Per-request timeout of the HTTP client.")
    empty_retries: int = Field(default=1, ge=0, description="Re-asks after an empty answer.")
    refusal_retries: int = Field(default=1, ge=0, description="Re-asks after a refusal.")


class RetriesExhausted(Exception):
    """Every attempt failed transiently; ``reason`` names the last failure."""

    def __init__(self, reason: str, attempts: int) -> None:
        super().__init__(f"{reason} (gave up after {attempts} attempts)")
        self.reason, self.attempts = reason, attempts


class Cooldown:
    """A time before which no call of one teacher starts (loop-agnostic: plain monotonic time)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._until = 0.0

    def hold(self, seconds: float) -> None:
        self._until = max(self._until, self._clock() + seconds)

    async def wait(self, sleep: Sleep = asyncio.sleep) -> None:
        while (remaining := self._until - self._clock()) > 0:
            await sleep(remaining)


def backoff_delay(config: RetryConfig, attempt: int, rng: random.Random) -> float:
    """Delay after failed attempt ``attempt`` (1-based): capped exponential, minus up to ``jitter`` of it."""
    raw = min(config.max_delay_s, config.base_delay_s * 2 ** (attempt - 1))
    return raw * (1 - config.jitter * rng.random())


async def with_retries(
    call: Callable[[], Awaitable[T]],
    config: RetryConfig,
    *,
    cooldown: Cooldown | None = None,
    sleep: Sleep = asyncio.sleep,
    rng: random.Random | None = None,
    label: str = "call",
) -> T:
    """Await ``call()`` until it succeeds; retry :class:`TransientError` only, at most ``max_attempts`` times."""
    rng = rng or random.Random()
    for attempt in range(1, config.max_attempts + 1):
        if cooldown is not None:
            await cooldown.wait(sleep)
        try:
            return await call()
        except TransientError as exc:
            if attempt == config.max_attempts:
                raise RetriesExhausted(exc.reason, attempt) from exc
            if exc.retry_after_s is not None:
                delay = min(exc.retry_after_s, config.max_retry_after_s) * (1 + 0.1 * rng.random())
                if cooldown is not None:
                    cooldown.hold(delay)
            else:
                delay = backoff_delay(config, attempt, rng)
            logger.warning("%s: %s; retry %d/%d in %.2fs", label, exc.reason, attempt, config.max_attempts - 1, delay)
            await sleep(delay)
    raise AssertionError("unreachable")
