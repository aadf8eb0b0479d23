"""What keeps a run from running away: spend caps and a circuit breaker, checked before every episode.

:class:`RunGuard` counts the run's spend live (every turn's cost as it comes back, the preflight's too) on
top of what the teacher's attempt ledger (``episode_attempts``, failed attempts included) held when the run
began. Once a cap is reached, or ``max_consecutive_failures`` calls in a row failed because the teacher is
unreachable, rejects the key or lacks the model, no new episode starts; episodes in flight finish and are
stored. :class:`GuardedPolicy` feeds the guard from the policy's turns.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum

from evoharness.teachers.base import Policy, PolicyError, PolicyOutput, PolicySession, TurnContext

TEACHER_WIDE_FAILURES = frozenset({"connection", "auth", "not_found"})
"""``PolicyError.kind`` values that say every call of the teacher would fail, not just this one."""


class StopKind(StrEnum):
    SPEND_CAP = "spend_cap"
    CIRCUIT_BREAKER = "circuit_breaker"


@dataclass(frozen=True)
class SpendCap:
    """``limit_usd`` on ``spent_before_usd`` + this run's spend; ``label`` names where the cap is set."""

    limit_usd: float
    label: str
    spent_before_usd: float = 0.0


@dataclass
class RunGuard:
    caps: tuple[SpendCap, ...] = ()
    max_consecutive_failures: int = 5
    spent_usd: float = 0.0  # this run so far, live
    consecutive_failures: int = 0
    stop_kind: StopKind | None = None
    stop_reason: str | None = None
    failures_seen: dict[str, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self._check_caps()

    def add_cost(self, usd: float | None) -> None:
        if usd:
            self.spent_usd += usd
            self._check_caps()

    def succeeded(self) -> None:
        """A call came back: the teacher is up, the failure streak ends."""
        self.consecutive_failures = 0

    def failed(self, kind: str | None, reason: str) -> None:
        if kind not in TEACHER_WIDE_FAILURES:
            return
        self.failures_seen[kind] = self.failures_seen.get(kind, 0) + 1
        self.consecutive_failures += 1
        if self.consecutive_failures >= self.max_consecutive_failures and self.stop_kind is None:
            self.stop_kind = StopKind.CIRCUIT_BREAKER
            self.stop_reason = (f"circuit breaker: {self.consecutive_failures} calls in a row failed "
                                f"({kind}); the last: {reason}")

    def may_start(self) -> bool:
        return self.stop_kind is None

    def _check_caps(self) -> None:
        for cap in self.caps:
            total = cap.spent_before_usd + self.spent_usd
            if total >= cap.limit_usd and self.stop_kind is None:
                self.stop_kind = StopKind.SPEND_CAP
                self.stop_reason = (f"spend cap reached: {cap.label} is ${cap.limit_usd:g}; spent ${total:.4f} "
                                    f"(${cap.spent_before_usd:.4f} before this run)")


@dataclass
class GuardedSession:
    inner: PolicySession
    guard: RunGuard

    async def act(self, context: TurnContext) -> PolicyOutput:
        try:
            output = await self.inner.act(context)
        except PolicyError as exc:
            self.guard.failed(exc.kind, str(exc))
            raise
        self.guard.succeeded()
        self.guard.add_cost(output.cost_usd)
        return output


class GuardedPolicy:
    """``inner`` with every turn's cost and failure reported to ``guard``."""

    def __init__(self, inner: Policy, guard: RunGuard) -> None:
        self.inner, self.guard = inner, guard
        self.name, self.needs_expert = inner.name, inner.needs_expert

    def start_episode(self, episode_id: str, objective: str) -> GuardedSession:
        return GuardedSession(self.inner.start_episode(episode_id, objective), self.guard)

    async def aclose(self) -> None:
        from evoharness.teachers.clients.base import aclose_client

        await aclose_client(self.inner)
