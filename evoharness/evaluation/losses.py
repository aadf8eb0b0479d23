"""Where a policy's lost games stopped: each lost episode placed at the first stage of its goal it never got past
(``evoharness.envs.alfworld.goals``: target never seen, seen not taken, taken not transformed, not placed, one of
two placed, every step done), with whether it picked up an object of another type, how many distinct places it
went to (few places over a whole budget is a policy going back and forth) and whether it ran out its step budget."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Any

from evoharness.envs.alfworld.goals import STAGE_ORDER, Goal, GoalReach, goal_reach
from warehouse import Warehouse

TASK_TYPES = ("pick_and_place_simple", "look_at_obj_in_light", "pick_clean_then_place_in_recep",
              "pick_heat_then_place_in_recep", "pick_cool_then_place_in_recep", "pick_two_obj_and_place")
SHORT_TYPE = dict(zip(TASK_TYPES, ("simple", "light", "clean", "heat", "cool", "two")))


@dataclass(frozen=True)
class LostGame:
    """A lost episode as the warehouse holds it, with how far it got."""

    episode_id: str
    game_id: str
    task_type: str
    repeats: int
    out_of_budget: bool
    reach: GoalReach


def lost_games(wh: Warehouse, policy: str, split: str, max_steps: int = 70) -> list[LostGame]:
    """Every finished lost episode of ``policy`` on ``split`` at ``max_steps``, with how far it got."""
    columns, rows = wh.query("lost_episodes_env_steps", policy=policy, split=split, max_steps=max_steps)
    lost = []
    for row in rows:
        episode: dict[str, Any] = dict(zip(columns, row))
        turns = [(turn["action"], turn["observation"]) for turn in episode["env_turns"]]
        lost.append(LostGame(episode["episode_id"], episode["game_id"], episode["task_type"], episode["repeats"],
                             episode["n_steps"] >= episode["max_steps"],
                             goal_reach(Goal.parse(episode["objective"]), turns)))
    return lost


def stage_counts(lost: list[LostGame]) -> dict[str, int]:
    """Lost games per stage, in task order, the stages that occur only."""
    counts = Counter(game.reach.stage for game in lost)
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
                sum(game.reach.took_other_object for game in games),
                sum(game.out_of_budget for game in games),
                round(sum(game.reach.places_visited for game in games) / len(games), 1),
                round(sum(game.repeats for game in games) / len(games), 1))

    rows = [row(stage, [game for game in lost if game.reach.stage == stage]) for stage in stage_counts(lost)]
    return [*rows, row("all", lost)] if lost else []
