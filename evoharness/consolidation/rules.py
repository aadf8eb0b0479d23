"""The rule-based consolidator: deterministic meta-action insertion, the offline default.

Rules (each fires at most once where noted):
- ``recall [<task verb> <target>]`` before the first environment command (recall before searching);
- ``commit [take a <target>]`` right after it (the first subgoal);
- after picking up a target object: ``note [<target> found in <receptacle type>]`` (once per episode and
  place type), then ``commit [<next subgoal>]`` (heat/cool/clean/light/put, per task type);
- after heating/cooling/cleaning it: ``commit [put <obj> in <receptacle type>]``;
- after placing the first of two objects: ``commit [take a <target>]``, then ``track [<target>]`` when
  Belief already knows another one (track when re-locating);
- before going back to a visited place not yet tracked: ``track [<place>]``.
Meta-actions are trimmed (track, then note, then recall) when the episode would exceed its step budget.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import yaml

from evoharness.consolidation.plan import Annotation, PlannedTurn, TaskInfo, env_turns
from evoharness.consolidation.replay import Replay
from evoharness.consolidation.source import SourceEpisode
from evoharness.envs.alfworld.belief import parse_items
from evoharness.harness.grammar import ActionKind
from evoharness.harness.prompts import prompts_dir

_PICKUP_RE = re.compile(r"^You pick up the ([a-z]+ \d+) from the ([a-z]+ \d+)\.")
_TREATED_RE = re.compile(r"^You (?:heat|cool|clean) the ([a-z]+ \d+) using the ([a-z]+ \d+)\.")
_MOVED_RE = re.compile(r"^You move the ([a-z]+ \d+) to the ([a-z]+ \d+)\.")
_CONTENTS_RE = re.compile(r"(?:On the|The) ([a-z]+ \d+)(?:, you see| is open\. In it, you see) (.*?)\.$")
_TASK_VERB = {
    "pick_heat_then_place_in_recep": "heat",
    "pick_cool_then_place_in_recep": "cool",
    "pick_clean_then_place_in_recep": "clean",
    "look_at_obj_in_light": "look",
    "pick_two_obj_and_place": "two",
    "pick_and_place_simple": "put",
}
_TRIM_ORDER = (ActionKind.TRACK, ActionKind.NOTE, ActionKind.RECALL, ActionKind.COMMIT)


@cache
def think_templates(path: Path | None = None) -> dict[str, str]:
    """The thought templates in ``teacher_prompts/consolidation/rule_thinks.yaml``."""
    return yaml.safe_load((path or prompts_dir() / "consolidation" / "rule_thinks.yaml").read_text())


def kind_of(name: str) -> str:
    return name.rsplit(" ", 1)[0]


@dataclass
class RuleConsolidator:
    """Deterministic: the same episode always gets the same annotation."""

    name: str = "rule"

    async def annotate(self, episode: SourceEpisode, replay: Replay) -> Annotation:
        return Annotation(turns=self.plan(episode, replay), lessons=[], attempts=1)

    def plan(self, episode: SourceEpisode, replay: Replay) -> list[PlannedTurn]:
        say = think_templates()
        task = TaskInfo.parse(replay.first.objective)
        verb = _TASK_VERB.get(episode.task_type, "put")
        query = f"{verb} {task.target}" if verb not in ("put", "two") else f"where {task.target}"
        first_goal = f"take a {task.target}"
        turns = [
            PlannedTurn(ActionKind.RECALL, query, say["recall_start"].format(query=query)),
            PlannedTurn(ActionKind.COMMIT, first_goal, say["commit_start"].format(subgoal=first_goal)),
        ]
        visited: set[str] = set()
        tracked: set[str] = set()
        seen: dict[str, str] = {}  # object -> receptacle, from observations
        noted: set[str] = set()
        placed = 0
        steps = env_turns(replay)
        for env_turn, step in zip(steps, replay.steps):
            command = step.command
            if command.startswith("go to ") and command[6:] in visited and command[6:] not in tracked:
                tracked.add(command[6:])
                turns.append(PlannedTurn(ActionKind.TRACK, command[6:], say["track_place"].format(place=command[6:])))
            turns.append(env_turn)
            observation = step.result.observation
            if command.startswith("go to "):
                visited.add(command[6:])
            if match := _CONTENTS_RE.search(observation):
                for obj in parse_items(match.group(2)):
                    seen[obj] = match.group(1)
            if step.result.done:
                break
            if (match := _PICKUP_RE.match(observation)) and kind_of(match.group(1)) == task.target:
                obj, place = match.groups()
                seen.pop(obj, None)
                if kind_of(place) not in noted:
                    noted.add(kind_of(place))
                    lesson = f"{task.target} found in {kind_of(place)}"
                    turns.append(PlannedTurn(ActionKind.NOTE, lesson, say["note_found"].format(
                        target=task.target, place=place)))
                goal = self._after_take(verb, obj, task, replay, step.source_t)
                turns.append(PlannedTurn(ActionKind.COMMIT, goal, say["commit_after_take"].format(obj=obj, subgoal=goal)))
            elif (match := _TREATED_RE.match(observation)) and kind_of(match.group(1)) == task.target:
                goal = f"put {match.group(1)} in {task.receptacle or 'place'}"
                turns.append(PlannedTurn(ActionKind.COMMIT, goal, say["commit_after_treat"].format(
                    obj=match.group(1), subgoal=goal)))
            elif (match := _MOVED_RE.match(observation)) and kind_of(match.group(1)) == task.target and verb == "two":
                placed += 1
                seen.pop(match.group(1), None)
                if placed == 1:
                    turns.append(PlannedTurn(ActionKind.COMMIT, first_goal, say["commit_after_place"].format(
                        obj=match.group(1), target=task.target)))
                    others = sorted(r for o, r in seen.items() if kind_of(o) == task.target)
                    if others:
                        tracked.add(others[0])
                        turns.append(PlannedTurn(ActionKind.TRACK, task.target, say["track_known"].format(
                            target=task.target)))
        return trim_to_budget(turns, episode.max_steps)

    @staticmethod
    def _after_take(verb: str, obj: str, task: TaskInfo, replay: Replay, after_t: int) -> str:
        if verb in ("heat", "cool", "clean"):
            return f"{verb} {obj}"
        if verb == "look":
            lamp = next((s.command[4:] for s in replay.steps if s.source_t > after_t and s.command.startswith("use ")),
                        task.lamp or "desklamp")
            return f"light {obj} with {lamp}"
        return f"put {obj} in {task.receptacle or 'place'}"


def trim_to_budget(turns: list[PlannedTurn], max_steps: int) -> list[PlannedTurn]:
    """Drop meta-actions (least useful kinds first, latest first) until the turns fit ``max_steps``."""
    result = list(turns)
    for kind in _TRIM_ORDER:
        while len(result) > max_steps:
            positions = [i for i, turn in enumerate(result) if turn.kind is kind]
            if not positions:
                break
            del result[positions[-1]]
    return result
