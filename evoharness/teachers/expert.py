"""The offline teacher: ALFWorld's handcoded expert, written in the turn grammar.

The environment computes the expert's next command (privileged ``expert_plan``); this policy writes it as
``<think>…</think><action>…</action>`` and, in ``bpe`` mode, adds scripted harness use so that offline data
exercises all four meta-actions: ``recall`` before searching, ``commit`` at task boundaries, ``note`` after
finding the target, ``track`` before returning to a place already visited.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from evoharness.harness.grammar import ActionKind, format_meta, format_turn
from evoharness.harness.prompts import Mode
from evoharness.teachers.base import PolicyError, PolicyOutput, TurnContext

_PICKUP_RE = re.compile(r"^You pick up the ([a-z]+ \d+) from the ([a-z]+ \d+)\.")
_TREATED_RE = re.compile(r"^You (heat|cool|clean) the ([a-z]+ \d+) using the ([a-z]+ \d+)\.")
_TURN_ON_RE = re.compile(r"^You turn on the ([a-z]+ \d+)\.")
_TARGET_RE = re.compile(
    r"(?:put|look at|examine|heat|cool|clean|find)\s+(?:a |an |some |two )?(?:hot |cool |clean )?([a-z]+)"
)


def target_object(objective: str) -> str:
    """The object type a task is about ("heat some apple and put it in diningtable." -> "apple")."""
    match = _TARGET_RE.search(objective.lower())
    return match.group(1) if match else "the target"


def _think_for(command: str) -> str:
    verb, _, rest = command.partition(" ")
    if command.startswith("go to "):
        return f"I go to {command[6:]} to see what is there."
    if verb == "open":
        return f"The {rest} is closed; I open it to look inside."
    if verb == "close":
        return f"Nothing I need in the {rest}; I close it."
    if verb == "take":
        return f"This is what I need: I {command}."
    if verb == "move":
        return f"I place it: {command}."
    if verb in ("heat", "cool", "clean", "use", "slice"):
        return f"Now I {command}."
    return f"I {command}."


def expert_env_turn(command: str) -> str:
    """The expert's turn for an environment command, with the thought its episodes write for it."""
    return format_turn(_think_for(command), command)


@dataclass
class ExpertSession:
    """Per-episode state of the scripted harness use."""

    mode: Mode
    objective: str
    visited: set[str] = field(default_factory=set)
    recalled: bool = False
    committed_search: bool = False
    tracked: set[str] = field(default_factory=set)
    queued: list[tuple[ActionKind, str, str]] = field(default_factory=list)

    async def act(self, context: TurnContext) -> PolicyOutput:
        plan = context.result.expert_plan
        if not plan:
            raise PolicyError("the expert teacher needs an environment opened with expert=True")
        command = plan[0]
        if self.mode is Mode.BPE:
            meta = self._meta_action(command, context.last_observation)
            if meta is not None:
                kind, argument, think = meta
                return PolicyOutput(format_turn(think, format_meta(kind, argument)))
        if command.startswith("go to "):
            self.visited.add(command[6:])
        return PolicyOutput(expert_env_turn(command))

    def _meta_action(self, command: str, last_observation: str) -> tuple[ActionKind, str, str] | None:
        target = target_object(self.objective)
        if not self.recalled:
            self.recalled = True
            return ActionKind.RECALL, f"where to find {target}", f"Before searching, I recall where {target}s are usually kept."
        if not self.committed_search:
            self.committed_search = True
            return ActionKind.COMMIT, f"find and take the {target}", "First subgoal: find the object."
        self._queue_after(last_observation)
        if self.queued:
            return self.queued.pop(0)
        if command.startswith("go to "):
            place = command[6:]
            if place in self.visited and place not in self.tracked:
                self.tracked.add(place)
                return ActionKind.TRACK, place, f"I have been at {place} before; let me check what I know about it."
        return None

    def _queue_after(self, observation: str) -> None:
        """Queue the meta-actions that the last environment step calls for (each fires once)."""
        if self.queued:
            return
        if match := _PICKUP_RE.match(observation):
            obj, place = match.groups()
            self.queued = [
                (ActionKind.NOTE, f"{obj.rsplit(' ', 1)[0]} found at {place.rsplit(' ', 1)[0]}", "Worth remembering where it was."),
                (ActionKind.COMMIT, f"finish the task with {obj}", f"I have the {obj}; the search subgoal is done."),
            ]
        elif match := _TREATED_RE.match(observation):
            self.queued = [(ActionKind.COMMIT, f"place the {match.group(2)}", f"The {match.group(2)} is ready to place.")]


@dataclass
class ExpertTeacher:
    """The embedded default teacher; deterministic for a given game and seed."""

    mode: Mode = Mode.BPE
    name: str = "expert"
    needs_expert: bool = True

    def start_episode(self, episode_id: str, objective: str) -> ExpertSession:
        return ExpertSession(mode=self.mode, objective=objective)
