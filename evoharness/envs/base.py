"""The environment protocol every domain implements, and the engine's ground truth used by audits."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable


@dataclass(frozen=True)
class StepResult:
    """What an environment returns from ``reset`` and ``step``.

    ``valid`` is False when the command was not admissible (the engine answered "Nothing happens.").
    ``expert_plan`` is privileged information, present only when the environment was opened with the
    expert enabled; policies other than the offline expert never see it.
    """

    observation: str
    admissible_commands: tuple[str, ...]
    objective: str
    won: bool
    done: bool
    score: float
    valid: bool = True
    expert_plan: tuple[str, ...] | None = None


@dataclass(frozen=True)
class WorldFacts:
    """The engine's ground-truth state, in display names ("apple 1"), for audits of Belief and Progress.

    ``located`` maps each object to every receptacle it is in or on (ALFWorld puts some objects in two at
    once, e.g. a keychain in a safe that stands on a dresser); ``holding`` is what the agent carries;
    ``opened`` the open receptacles; ``flags`` maps object -> set of states (hot, cool, clean, sliced, on);
    ``agent_near`` the receptacles at the agent's location (empty in the middle of the room).
    """

    located: dict[str, frozenset[str]] = field(default_factory=dict)
    holding: frozenset[str] = frozenset()
    opened: frozenset[str] = frozenset()
    flags: dict[str, frozenset[str]] = field(default_factory=dict)
    agent_near: frozenset[str] = frozenset()
    receptacles: frozenset[str] = frozenset()


@runtime_checkable
class Environment(Protocol):
    """A text game: reset to the start, step with a command, read the ground truth."""

    engine: str

    def reset(self, seed: int | None = None) -> StepResult:
        """Start (or restart) the game; ``seed`` seeds every source of randomness the engine and expert use."""
        ...

    def step(self, command: str) -> StepResult:
        """Apply one command. Inadmissible commands leave the state unchanged and return ``valid=False``."""
        ...

    def facts(self) -> WorldFacts:
        """The engine's ground truth at the current step."""
        ...

    def close(self) -> None:
        """Release engine resources."""
        ...
