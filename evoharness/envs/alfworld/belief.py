"""ALFWorld's Belief: a scene graph parsed from the engine's observation sentences.

Every sentence the engine can produce (see the ``grammar`` of a ``game.tw-pddl``) maps to one update:
arriving at or opening a receptacle reveals its contents, take/move change an object's place,
heat/cool/clean/slice/use set flags, ``inventory`` states what is held. Unknown sentences change nothing.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from evoharness.envs.base import WorldFacts

_ITEM_RE = re.compile(r"(?:an?|some)\s+([a-z]+(?: [a-z]+)* \d+)")
_ROOM_RE = re.compile(r"Looking quickly around you, you see (.*?)\.(?:\n|$)")
_ARRIVE_RE = re.compile(r"^You arrive at ([a-z]+ \d+)\.")
_OPEN_RE = re.compile(r"^You open the ([a-z]+ \d+)\.")
_CLOSE_RE = re.compile(r"^You close the ([a-z]+ \d+)\.")
_IS_OPEN_RE = re.compile(r"The ([a-z]+ \d+) is open\. In it, you see (.*?)\.$")
_IS_CLOSED_RE = re.compile(r"The ([a-z]+ \d+) is closed\.$")
_ON_RE = re.compile(r"On the ([a-z]+ \d+), you see (.*?)\.$")
_TAKE_RE = re.compile(r"^You pick up the ([a-z]+ \d+) from the ([a-z]+ \d+)\.$")
_MOVE_RE = re.compile(r"^You move the ([a-z]+ \d+) to the ([a-z]+ \d+)\.$")
_TREAT_RE = re.compile(r"^You (heat|cool|clean) the ([a-z]+ \d+) using the ([a-z]+ \d+)\.$")
_SLICE_RE = re.compile(r"^You slice the ([a-z]+ \d+) with the ([a-z]+ \d+)\.$")
_TURN_ON_RE = re.compile(r"^You turn on the ([a-z]+ \d+)\.$")
_CARRY_RE = re.compile(r"^You are carrying: (.*)\.$")
_TREAT_FLAG = {"heat": "hot", "cool": "cool", "clean": "clean"}
_WORD_RE = re.compile(r"[a-z]+")


def _natural(name: str) -> tuple[str, int]:
    """'cabinet 10' sorts after 'cabinet 9'."""
    kind, _, number = name.rpartition(" ")
    return (kind, int(number)) if number.isdigit() else (name, 0)


def parse_items(text: str) -> list[str]:
    """'a apple 1, a bread 2, and a knife 1' -> ['apple 1', 'bread 2', 'knife 1']; 'nothing' -> []."""
    return [] if text.strip() == "nothing" else _ITEM_RE.findall(text)


@dataclass
class AlfworldBelief:
    """Scene graph: receptacles, object locations, held objects, open/closed, flags, visits.

    ``max_render_objects`` caps the prompt view; objects whose type appears in the objective come first.
    """

    max_render_objects: int = 24
    receptacles: list[str] = field(default_factory=list)
    located: dict[str, str] = field(default_factory=dict)
    holding: list[str] = field(default_factory=list)
    opened: set[str] = field(default_factory=set)
    closed: set[str] = field(default_factory=set)
    flags: dict[str, set[str]] = field(default_factory=dict)
    visited: list[str] = field(default_factory=list)
    inspected: set[str] = field(default_factory=set)
    at: str | None = None
    objective: str = ""

    def reset(self, observation: str, objective: str) -> None:
        self.__init__(max_render_objects=self.max_render_objects)  # type: ignore[misc]
        self.objective = objective
        room = _ROOM_RE.search(observation)
        if room:
            self.receptacles = parse_items(room.group(1))

    def update(self, command: str, observation: str) -> None:
        text = observation.strip()
        if text == "Nothing happens.":
            return
        if match := _ARRIVE_RE.match(text):
            self._arrive(match.group(1))
        elif match := _OPEN_RE.match(text):
            self._set_open(match.group(1), True)
        elif match := _CLOSE_RE.match(text):
            self._set_open(match.group(1), False)
        elif match := _TAKE_RE.match(text):
            obj = match.group(1)
            self.located.pop(obj, None)
            if obj not in self.holding:
                self.holding.append(obj)
        elif match := _MOVE_RE.match(text):
            obj, receptacle = match.groups()
            if obj in self.holding:
                self.holding.remove(obj)
            self.located[obj] = receptacle
        elif match := _TREAT_RE.match(text):
            self.flags.setdefault(match.group(2), set()).add(_TREAT_FLAG[match.group(1)])
        elif match := _SLICE_RE.match(text):
            self.flags.setdefault(match.group(1), set()).add("sliced")
        elif match := _TURN_ON_RE.match(text):
            self.flags.setdefault(match.group(1), set()).add("on")
        elif match := _CARRY_RE.match(text):
            self.holding = parse_items(match.group(1))
        elif text == "You are not carrying anything.":
            self.holding = []
        self._read_contents(text)

    def _arrive(self, receptacle: str) -> None:
        self.at = receptacle
        if receptacle not in self.visited:
            self.visited.append(receptacle)
        if receptacle not in self.receptacles:
            self.receptacles.append(receptacle)

    def _set_open(self, receptacle: str, is_open: bool) -> None:
        (self.opened if is_open else self.closed).add(receptacle)
        (self.closed if is_open else self.opened).discard(receptacle)

    def _read_contents(self, text: str) -> None:
        """Contents sentences replace what was believed to be in that receptacle."""
        if match := _IS_OPEN_RE.search(text):
            self._set_open(match.group(1), True)
            self._set_contents(match.group(1), parse_items(match.group(2)))
        elif match := _IS_CLOSED_RE.search(text):
            self._set_open(match.group(1), False)
        elif match := _ON_RE.search(text):
            self._set_contents(match.group(1), parse_items(match.group(2)))

    def _set_contents(self, receptacle: str, objects: list[str]) -> None:
        self.inspected.add(receptacle)
        for obj in [o for o, r in self.located.items() if r == receptacle and o not in objects]:
            del self.located[obj]
        for obj in objects:
            self.located[obj] = receptacle
            if obj in self.holding:
                self.holding.remove(obj)

    # -- queries -------------------------------------------------------------------------------------
    def contents(self, receptacle: str) -> list[str]:
        return sorted(obj for obj, where in self.located.items() if where == receptacle)

    def find(self, object_type: str) -> list[tuple[str, str]]:
        """(object, receptacle) pairs whose object name starts with ``object_type`` ('apple' -> apple 1)."""
        return sorted((o, r) for o, r in self.located.items() if o.rsplit(" ", 1)[0] == object_type)

    def track(self, query: str) -> str:
        words = set(_WORD_RE.findall(query.lower())) - {"the", "a", "an", "some", "where", "is", "find"}
        lines: list[str] = []
        for obj in self.holding:
            if not words or obj.rsplit(" ", 1)[0] in words:
                lines.append(f"you hold {obj}{self._flag_text(obj)}")
        for obj, receptacle in sorted(self.located.items()):
            if obj.rsplit(" ", 1)[0] in words or receptacle.rsplit(" ", 1)[0] in words:
                lines.append(f"{obj}{self._flag_text(obj)} is in/on {receptacle}")
        if lines:
            return "; ".join(lines[:12]) + "."
        visited = ", ".join(self.visited) if self.visited else "nowhere yet"
        unvisited = [r for r in self.receptacles if r not in self.visited]
        return (
            f"No known {' '.join(sorted(words)) or 'objects'}. Visited: {visited}. "
            f"Not yet visited: {', '.join(unvisited) if unvisited else 'none'}."
        )

    def _flag_text(self, obj: str) -> str:
        flags = sorted(self.flags.get(obj, ()))
        return f" ({', '.join(flags)})" if flags else ""

    def render(self) -> str:
        goal_words = set(_WORD_RE.findall(self.objective.lower()))
        objects = sorted(self.located, key=lambda o: (o.rsplit(" ", 1)[0] not in goal_words, o))
        shown = objects[: self.max_render_objects]
        lines = [f"- location: {self.at or 'middle of the room'}"]
        lines.append(f"- holding: {', '.join(o + self._flag_text(o) for o in self.holding) or 'nothing'}")
        if shown:
            lines.append("- seen: " + "; ".join(f"{o}{self._flag_text(o)} in/on {self.located[o]}" for o in shown))
            if len(objects) > len(shown):
                lines[-1] += f"; … {len(objects) - len(shown)} more"
        if self.opened:
            lines.append(f"- open: {', '.join(sorted(self.opened))}")
        unvisited = [r for r in self.receptacles if r not in self.visited]
        lines.append(f"- visited: {', '.join(self.visited) or 'none'}")
        lines.append(f"- not visited: {', '.join(unvisited) or 'none'}")
        return "\n".join(lines)

    def render_compact(self) -> str:
        """The same scene graph in fewer tokens, for small students: only the task's objects are listed (the
        rest are counted) and places are named once, in natural order."""
        goal_words = set(_WORD_RE.findall(self.objective.lower()))
        task_objects = sorted((o for o in self.located if o.rsplit(" ", 1)[0] in goal_words), key=_natural)
        held = ", ".join(o + self._flag_text(o) for o in self.holding) or "nothing"
        lines = [f"at: {self.at or 'middle of the room'} | holding: {held}"]
        seen = "; ".join(f"{o}{self._flag_text(o)} on {self.located[o]}" for o in task_objects) or "none"
        lines.append(f"task objects seen: {seen} | other objects seen: {len(self.located) - len(task_objects)}")
        if self.opened:
            lines.append(f"open: {', '.join(sorted(self.opened, key=_natural))}")
        unvisited = sorted((r for r in self.receptacles if r not in self.visited), key=_natural)
        lines.append(f"unvisited: {', '.join(unvisited) or 'none'}")
        return "\n".join(lines)

    def snapshot(self) -> dict[str, Any]:
        return {
            "at": self.at,
            "holding": list(self.holding),
            "located": dict(sorted(self.located.items())),
            "opened": sorted(self.opened),
            "closed": sorted(self.closed),
            "flags": {obj: sorted(states) for obj, states in sorted(self.flags.items())},
            "visited": list(self.visited),
            "inspected": sorted(self.inspected),
            "receptacles": list(self.receptacles),
        }


@dataclass(frozen=True)
class BeliefAccuracy:
    """How many belief claims the engine confirms (precision) and how much observed truth it holds (recall)."""

    claims: int
    correct: int
    observable: int
    recalled: int

    @property
    def precision(self) -> float | None:
        return self.correct / self.claims if self.claims else None

    @property
    def recall(self) -> float | None:
        return self.recalled / self.observable if self.observable else None


def belief_accuracy(belief: AlfworldBelief, facts: WorldFacts) -> BeliefAccuracy:
    """Compare object locations, held objects, open state and flags with the engine's ground truth.

    Recall is measured over what the agent could have observed: objects in receptacles whose contents
    it has seen, and what it holds.
    """
    claims = correct = 0
    for obj, receptacle in belief.located.items():
        claims += 1
        correct += receptacle in facts.located.get(obj, ())
    for obj in belief.holding:
        claims += 1
        correct += obj in facts.holding
    for receptacle in belief.opened:
        claims += 1
        correct += receptacle in facts.opened
    for receptacle in belief.closed:
        claims += 1
        correct += receptacle not in facts.opened
    for obj, states in belief.flags.items():
        for state in states:
            claims += 1
            correct += state in facts.flags.get(obj, frozenset())
    observable = recalled = 0
    for obj, receptacles in facts.located.items():
        if receptacles & belief.inspected:
            observable += 1
            recalled += belief.located.get(obj) in receptacles
    for obj in facts.holding:
        observable += 1
        recalled += obj in belief.holding
    return BeliefAccuracy(claims=claims, correct=correct, observable=observable, recalled=recalled)
