"""A responder that plays ALFWorld sensibly from the rendered prompt, for acceptance runs and benchmarks.

It reads the task, the admissible commands and the recent actions from the prompt, finds the game's
stored walkthrough by its objective, and answers the walkthrough's next command; in ``bpe`` prompts it
opens with one ``recall`` so harness calls appear in the data. Games that share an objective are told
apart by their rooms (the places the fast engine lists at the start). Where no walkthrough fits it picks
an admissible command (``look`` if there is one).
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Iterable

from evoharness.envs.alfworld.catalog import GameCatalog, GameRecord
from evoharness.harness.grammar import META_ACTIONS, format_turn
from evoharness.testing.loopback import Call, Reply

_TASK_RE = re.compile(r"^Task: (.*)$", re.MULTILINE)
_ADMISSIBLE_RE = re.compile(r"^Admissible commands:\n(.*)$", re.MULTILINE)
_RECENT_RE = re.compile(r"^Recent actions:\n((?:- .*\n?)*)", re.MULTILINE)
_STEP_RE = re.compile(r"^Step (\d+) of \d+", re.MULTILINE)
_META_VERBS = tuple(kind.value for kind in META_ACTIONS)


def _key(objective: str) -> str:
    return " ".join(objective.lower().split()).rstrip(".")


def walkthrough(game: GameRecord) -> tuple[str, list[str]]:
    """(objective, walkthrough commands) of a game, from its ``game.tw-pddl``."""
    data = game.load_game_json()
    match = re.search(r'Your task is to: ([^"\\]*)', data["grammar"])
    return (match.group(1) if match else ""), [c.lower() for c in data.get("walkthrough") or []]


class WalkthroughPlayer:
    """``games``: the games it may meet (their objectives index the walkthroughs)."""

    def __init__(
        self, games: Iterable[GameRecord], use_meta: bool = True, output_tokens: int | None = None,
        history_length: int = 10, fingerprint: bool = True,
    ) -> None:
        self.plans: dict[str, list[list[str]]] = defaultdict(list)
        self.rooms: dict[tuple[str, ...], set[str]] = {}  # plan -> the room's places, where known
        for game in games:
            objective, commands = walkthrough(game)
            if commands:
                self.plans[_key(objective)].append(commands)
                if fingerprint:
                    self.rooms[tuple(commands)] = room_places(game)
        self.use_meta = use_meta
        self.output_tokens = output_tokens
        self.history_length = history_length

    @classmethod
    def for_split(cls, split: str, limit: int | None = None, data_root: str | None = None) -> WalkthroughPlayer:
        return cls(GameCatalog(data_root).games(split, limit))

    def next_action(self, prompt: str) -> tuple[str, str]:
        """(think, action) for a rendered prompt."""
        task = _TASK_RE.search(prompt)
        admissible_match = _ADMISSIBLE_RE.search(prompt)
        admissible = [c.strip() for c in admissible_match.group(1).split(",")] if admissible_match else []
        recent_match = _RECENT_RE.search(prompt)
        recent = [line[2:].strip() for line in recent_match.group(1).splitlines()] if recent_match else []
        objective = task.group(1) if task else ""
        if self.use_meta and not recent and "recall [" in prompt:
            return f"Before acting I recall what I know about: {objective}", f"recall [{objective}]"
        done = [a for a in recent if a != "(invalid)" and not a.startswith(_META_VERBS)]
        complete = len(recent) < self.history_length  # else older actions fell out of the window
        step_match = _STEP_RE.search(prompt)
        estimate = (int(step_match.group(1)) - 1 - (len(recent) - len(done))) if step_match else len(done)
        places = {c[6:] for c in admissible if c.startswith("go to ")}
        plans = sorted(self.plans.get(_key(objective), []),
                       key=lambda plan: (-_room_fit(self.rooms.get(tuple(plan)), places), -_scene_fit(plan, places)))
        for plan in plans:  # games sharing an objective differ in scene: the plan that fits the room first
            step = _position(plan, done, None if complete else estimate)
            if step is not None and step < len(plan) and plan[step] in admissible:
                return f"Following my plan, step {step + 1} of {len(plan)}.", plan[step]
        fallback = "look" if "look" in admissible else (admissible[0] if admissible else "look")
        return "I am not sure where I am in my plan; I look around.", fallback

    def __call__(self, call: Call) -> Reply:
        think, action = self.next_action(call.prompt)
        return Reply(text=format_turn(think, action), output_tokens=self.output_tokens)


def room_places(game: GameRecord) -> set[str]:
    """The places of a game's room (its ``go to`` commands at the start), read with the fast engine."""
    from evoharness.envs.alfworld import make_env

    env = make_env(game, engine="fast")
    try:
        start = env.reset(seed=0)
    finally:
        env.close()
    return {c[6:] for c in start.admissible_commands if c.startswith("go to ")}


def _room_fit(room: set[str] | None, places: set[str]) -> float:
    """Jaccard overlap of a game's room and the places admissible now (0 when the room is unknown)."""
    return len(room & places) / len(room | places) if room and places else 0.0


def _scene_fit(plan: list[str], places: set[str]) -> float:
    """The share of the plan's destinations that the room has (``go to`` commands admissible now)."""
    targets = {command[6:] for command in plan if command.startswith("go to ")}
    return len(targets & places) / len(targets) if targets else 0.0


def _position(plan: list[str], done: list[str], estimate: int | None) -> int | None:
    """How far into ``plan`` the past commands ``done`` reach (None: they do not fit).

    ``estimate`` is None when ``done`` is the whole history (it must be a prefix of the plan); otherwise
    ``done`` is a tail and, of the places it fits, the one nearest the estimated count of commands wins.
    """
    n = len(done)
    if estimate is None:
        return n if plan[:n] == done else None
    ends = [end for end in range(n, len(plan) + 1) if plan[end - n:end] == done]
    return min(ends, key=lambda end: abs(end - estimate)) if ends else None
