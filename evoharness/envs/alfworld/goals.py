"""How far an ALFWorld episode got towards its goal, read from ALFWorld's own text: the goal from its objective
templates, the steps done from its success messages ("You pick up ...", "You heat ...", "You move ...").

A goal's stages, in task order (the transformation and placing stages only where the goal has them):

1. ``target never seen``: no observation showed an object of the goal's type;
2. ``seen, not taken``: one was seen but never picked up;
3. ``taken, not heated|cooled|cleaned|lit``: picked up, never transformed (heated, cooled, cleaned, or looked at
   under a lit lamp while held);
4. ``not placed``: never put in or on a receptacle of the goal's type;
5. ``one of two placed``: a two-object goal with one object placed;
6. ``every step done``: every step above happened (a lost game got there out of order, or with another instance
   than the one placed).

An episode's *stage* is the first it never got past; its *progress* is that stage's position among its goal's
stages, 0 (target never seen) to 1 (every step done)."""

from __future__ import annotations

import re
from dataclasses import dataclass

_LOOK = re.compile(r"^(?:look at|examine the) (\w+) (?:under|with) the \w+\.$")
_PUT = re.compile(r"^(?:put|find) (?:a|some|two) (?:(clean|hot|cool) )?(\w+)(?: and put (?:it|them))? (?:in|on) (\w+)\.$")
_DO_THEN_PUT = re.compile(r"^(clean|heat|cool) some (\w+) and put it (?:in|on) (\w+)\.$")
_VERB = {"clean": "clean", "hot": "heat", "heat": "heat", "cool": "cool"}
_TAKE = re.compile(r"^take (\w+) (\d+) from ")
_LAMP = re.compile(r"^use (?:desklamp|floorlamp) \d+$")

STAGE_ORDER = ("target never seen", "seen, not taken", "taken, not heated", "taken, not cooled", "taken, not cleaned",
               "taken, not lit", "not placed", "one of two placed", "every step done")


@dataclass(frozen=True)
class Goal:
    """What a game asks: an object type, the transformation it needs (``heat``, ``cool``, ``clean``, ``light`` or
    none), the receptacle type it goes to (none for ``light``) and how many objects."""

    target: str
    transform: str | None
    receptacle: str | None
    count: int

    @classmethod
    def parse(cls, objective: str) -> Goal:
        """The goal of an ALFWorld objective ("heat some egg and put it in garbagecan."); a ValueError naming the
        objective when it fits none of ALFWorld's templates."""
        text = objective.strip().lower()
        if match := _LOOK.match(text):
            return cls(match.group(1), "light", None, 1)
        if match := _PUT.match(text) or _DO_THEN_PUT.match(text):
            verb, target, receptacle = match.groups()
            return cls(target, _VERB[verb] if verb else None, receptacle, 2 if " two " in f" {text}" else 1)
        raise ValueError(f"objective {objective!r} fits no ALFWorld goal template")

    def stages(self) -> tuple[str, ...]:
        """This goal's stages in task order, from ``target never seen`` to ``every step done``."""
        transformed = [f"taken, not {'lit' if self.transform == 'light' else self.transform + 'ed'}"] \
            if self.transform else []
        placed = ["not placed", *(["one of two placed"] if self.count == 2 else [])] if self.receptacle else []
        return ("target never seen", "seen, not taken", *transformed, *placed, "every step done")


@dataclass(frozen=True)
class GoalReach:
    """How far an episode got: the first stage it never got past, whether it picked up an object of another type
    than the goal's (a grounding error: the action named the wrong object), and how many distinct places it
    arrived at."""

    stage: str
    took_other_object: bool
    places_visited: int


def goal_reach(goal: Goal, env_turns: list[tuple[str, str]]) -> GoalReach:
    """How far the environment turns, each (action, observation) in order, got towards ``goal``."""
    target_number = re.compile(rf"\b{re.escape(goal.target)} \d+\b")
    seen = transformed = took_other = False
    taken: set[str] = set()
    placed: set[str] = set()
    places: set[str] = set()
    for action, observation in env_turns:
        if action.startswith("go to ") and observation.startswith("You arrive"):
            places.add(action.removeprefix("go to "))
        seen = seen or bool(target_number.search(observation))
        if (take := _TAKE.match(action)) and observation.startswith("You pick up"):
            if take.group(1) == goal.target:
                taken.add(take.group(2))
            else:
                took_other = True
        if goal.transform == "light":
            transformed = transformed or bool(taken and _LAMP.match(action) and observation.startswith("You turn on"))
        elif goal.transform and re.match(rf"{goal.transform} {re.escape(goal.target)} \d+ with ", action):
            transformed = transformed or observation.startswith(f"You {goal.transform}")
        if goal.receptacle and observation.startswith("You move") and (
                put := re.match(rf"move {re.escape(goal.target)} (\d+) to {re.escape(goal.receptacle)} \d+$", action)):
            placed.add(put.group(1))
    stages = goal.stages()
    done = {stages[0]: seen, stages[1]: bool(taken)} | {
        stage: transformed if stage.startswith("taken, not") else len(placed) >= (2 if stage == "one of two placed" else 1)
        for stage in stages[2:-1]}
    stage = next((stage for stage in stages[:-1] if not done[stage]), stages[-1])
    return GoalReach(stage, took_other, len(places))


def goal_progress(goal: Goal, reach: GoalReach) -> float:
    """The position of the stage reached among the goal's stages: 0 (target never seen) to 1 (every step done)."""
    stages = goal.stages()
    return stages.index(reach.stage) / (len(stages) - 1)
