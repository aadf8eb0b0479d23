"""Progress: a short list of subgoals with a status, changed by the ``commit`` meta-action."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any


class SubgoalStatus(StrEnum):
    OPEN = "open"
    PARTIAL = "partial"
    COMPLETE = "complete"
    BLOCKED = "blocked"
    DROPPED = "dropped"


@dataclass
class Subgoal:
    text: str
    status: SubgoalStatus = SubgoalStatus.OPEN
    opened_at: int = 0
    closed_at: int | None = None


@dataclass
class Progress:
    """At most ``capacity`` subgoals; the oldest finished ones are forgotten first."""

    capacity: int = 8
    subgoals: list[Subgoal] = field(default_factory=list)

    def reset(self) -> None:
        self.subgoals = []

    def open_subgoals(self) -> list[Subgoal]:
        return [g for g in self.subgoals if g.status in (SubgoalStatus.OPEN, SubgoalStatus.PARTIAL)]

    def commit(self, text: str, t: int) -> str:
        """Mark every open subgoal complete and, when ``text`` is given, open it as the next subgoal."""
        closed = self.open_subgoals()
        for goal in closed:
            goal.status = SubgoalStatus.COMPLETE
            goal.closed_at = t
        if text:
            self.subgoals.append(Subgoal(text=text, opened_at=t))
        while len(self.subgoals) > self.capacity:
            finished = [g for g in self.subgoals if g.status not in (SubgoalStatus.OPEN, SubgoalStatus.PARTIAL)]
            self.subgoals.remove(finished[0] if finished else self.subgoals[0])
        done = "; ".join(g.text for g in closed)
        parts = [f"completed: {done}" if done else "nothing was open"]
        if text:
            parts.append(f"now working on: {text}")
        return "Committed. " + ". ".join(parts) + "."

    def render(self) -> str:
        if not self.subgoals:
            return "(no subgoals yet)"
        return "\n".join(f"- [{g.status.value}] {g.text}" for g in self.subgoals)

    def snapshot(self) -> list[dict[str, Any]]:
        return [
            {"text": g.text, "status": g.status.value, "opened_at": g.opened_at, "closed_at": g.closed_at}
            for g in self.subgoals
        ]
