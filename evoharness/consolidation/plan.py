"""The consolidator interface: an episode's replayed trajectory in, an annotation (planned turns) out."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Protocol

from evoharness.consolidation.replay import Replay
from evoharness.consolidation.source import SourceEpisode
from evoharness.harness.grammar import ActionKind, format_meta

_TARGET_RE = re.compile(
    r"(?:put|look at|examine|heat|cool|clean|find)\s+(?:a |an |some |two |the )?(?:hot |cool |clean )?([a-z]+)"
)
_RECEPTACLE_RE = re.compile(r"(?:in|on) (?:the |a |an )?([a-z]+)\.?$")
_LAMP_RE = re.compile(r"(?:under|with) (?:the |a )?([a-z]+)\.?$")


@dataclass(frozen=True)
class TaskInfo:
    """What an objective asks, in types: target object, destination receptacle, lamp."""

    target: str
    receptacle: str | None
    lamp: str | None

    @classmethod
    def parse(cls, objective: str) -> TaskInfo:
        text = objective.lower().strip()
        target = _TARGET_RE.search(text)
        receptacle = _RECEPTACLE_RE.search(text)
        lamp = _LAMP_RE.search(text) if text.startswith(("look", "examine")) else None
        return cls(
            target=target.group(1) if target else "object",
            receptacle=receptacle.group(1) if receptacle and not lamp else None,
            lamp=lamp.group(1) if lamp else None,
        )


@dataclass(frozen=True)
class PlannedTurn:
    """One turn of the consolidated episode. ``env_index`` points into ``Replay.steps`` for env turns."""

    kind: ActionKind
    argument: str
    think: str
    env_index: int | None = None

    @property
    def action_text(self) -> str:
        return self.argument if self.kind is ActionKind.ENV else format_meta(self.kind, self.argument)


@dataclass
class Annotation:
    """A consolidator's answer for one episode. ``failure`` set means no examples are made."""

    turns: list[PlannedTurn] = field(default_factory=list)
    lessons: list[str] = field(default_factory=list)
    attempts: int = 1
    input_tokens: int | None = None
    output_tokens: int | None = None
    cost_usd: float | None = None
    failure: str | None = None


class Consolidator(Protocol):
    """Rule-based and LLM consolidators share this interface."""

    name: str

    async def annotate(self, episode: SourceEpisode, replay: Replay) -> Annotation:
        ...


def env_turns(replay: Replay) -> list[PlannedTurn]:
    """The replayed environment commands as planned turns (the source teacher's thoughts kept)."""
    return [
        PlannedTurn(ActionKind.ENV, step.command, step.think or f"I {step.command}.", env_index=i)
        for i, step in enumerate(replay.steps)
    ]
