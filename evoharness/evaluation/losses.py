"""Where a policy's lost games stopped: each lost episode is read against its goal (the object, what must be done
to it, where it goes) and placed at the first step of the task it never completed. The stages, in task order:

1. ``target never seen``: no observation showed an object of the goal's type;
2. ``seen, not taken``: one was seen but never picked up;
3. ``taken, not heated|cooled|cleaned|lit``: picked up, never transformed (heated, cooled, cleaned, or looked at
   under a lit lamp while held);
4. ``not placed``: never put in or on a receptacle of the goal's type;
5. ``one of two placed``: a two-object task with one object placed;
6. ``every step done, lost``: every step above happened, yet the game was not won (done out of order, or to
   another instance than the one placed).

Beside the stage, each loss says whether the policy picked up an object of another type (a grounding error: the
action named the wrong object), how many distinct places it went to (few places over a whole budget is a policy
going back and forth) and whether it ran out its step budget. The rules read ALFWorld's own text: its
goal templates and its success messages ("You pick up ...", "You heat ...", "You move ...")."""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass
from typing import Any

from warehouse import Warehouse

TASK_TYPES = ("pick_and_place_simple", "look_at_obj_in_light", "pick_clean_then_place_in_recep",
              "pick_heat_then_place_in_recep", "pick_cool_then_place_in_recep", "pick_two_obj_and_place")
SHORT_TYPE = dict(zip(TASK_TYPES, ("simple", "light", "clean", "heat", "cool", "two")))

_LOOK = re.compile(r"^(?:look at|examine the) (\w+) (?:under|with) the \w+\.$")
_PUT = re.compile(r"^(?:put|find) (?:a|some|two) (?:(clean|hot|cool) )?(\w+)(?: and put (?:it|them))? (?:in|on) (\w+)\.$")
_DO_THEN_PUT = re.compile(r"^(clean|heat|cool) some (\w+) and put it (?:in|on) (\w+)\.$")
_VERB = {"clean": "clean", "hot": "heat", "heat": "heat", "cool": "cool"}
_TAKE = re.compile(r"^take (\w+) (\d+) from ")
_LAMP = re.compile(r"^use (?:desklamp|floorlamp) \d+$")


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


@dataclass(frozen=True)
class LossDiagnosis:
    """One lost episode: the stage it stopped at, whether it picked up an object of another type than the goal's,
    how many distinct places it arrived at, and whether it ran out its step budget."""

    stage: str
    took_other_object: bool
    places_visited: int
    out_of_budget: bool


def diagnose(goal: Goal, env_turns: list[tuple[str, str]], out_of_budget: bool = False) -> LossDiagnosis:
    """The stage of a lost episode from its environment turns, each (action, observation), in order."""
    target_number = re.compile(rf"\b{re.escape(goal.target)} \d+\b")
    seen = transformed = False
    taken: set[str] = set()
    placed: set[str] = set()
    places: set[str] = set()
    took_other = False
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
    if not seen:
        stage = "target never seen"
    elif not taken:
        stage = "seen, not taken"
    elif goal.transform and not transformed:
        stage = f"taken, not {'lit' if goal.transform == 'light' else goal.transform + 'ed'}"
    elif goal.receptacle and not placed:
        stage = "not placed"
    elif goal.receptacle and len(placed) < goal.count:
        stage = "one of two placed"
    else:
        stage = "every step done, lost"
    return LossDiagnosis(stage, took_other, len(places), out_of_budget)


STAGE_ORDER = ("target never seen", "seen, not taken", "taken, not heated", "taken, not cooled", "taken, not cleaned",
               "taken, not lit", "not placed", "one of two placed", "every step done, lost")


@dataclass(frozen=True)
class LostGame:
    """A lost episode as the warehouse holds it, with its diagnosis."""

    episode_id: str
    game_id: str
    task_type: str
    repeats: int
    diagnosis: LossDiagnosis


def lost_games(wh: Warehouse, policy: str, split: str, max_steps: int = 70) -> list[LostGame]:
    """Every finished lost episode of ``policy`` on ``split`` at ``max_steps``, diagnosed."""
    columns, rows = wh.query("lost_episodes_env_steps", policy=policy, split=split, max_steps=max_steps)
    lost = []
    for row in rows:
        episode: dict[str, Any] = dict(zip(columns, row))
        turns = [(turn["action"], turn["observation"]) for turn in episode["env_turns"]]
        diagnosis = diagnose(Goal.parse(episode["objective"]), turns, episode["n_steps"] >= episode["max_steps"])
        lost.append(LostGame(episode["episode_id"], episode["game_id"], episode["task_type"], episode["repeats"],
                             diagnosis))
    return lost


def stage_counts(lost: list[LostGame]) -> dict[str, int]:
    """Lost games per stage, in task order, the stages that occur only."""
    counts = Counter(game.diagnosis.stage for game in lost)
    return {stage: counts[stage] for stage in STAGE_ORDER if counts[stage]}


LOSS_COLUMNS = ("stage", *SHORT_TYPE.values(), "lost", "share", "took another object", "out of budget",
                "mean places visited", "mean repeats")


def loss_table(lost: list[LostGame]) -> list[tuple]:
    """One row per stage that occurs (in task order), then ``all``: lost games by task type, their share of all
    losses, how many picked up an object of another type, how many ran out their budget, and the mean distinct
    places visited and repeats."""
    def row(stage: str, games: list[LostGame]) -> tuple:
        by_type = Counter(game.task_type for game in games)
        return (stage, *(by_type[task_type] for task_type in TASK_TYPES), len(games), f"{len(games) / len(lost):.0%}",
                sum(game.diagnosis.took_other_object for game in games),
                sum(game.diagnosis.out_of_budget for game in games),
                round(sum(game.diagnosis.places_visited for game in games) / len(games), 1),
                round(sum(game.repeats for game in games) / len(games), 1))

    rows = [row(stage, [game for game in lost if game.diagnosis.stage == stage]) for stage in stage_counts(lost)]
    return [*rows, row("all", lost)] if lost else []
