"""Adapter over the real ALFWorld text engine: textworld's PddlEnv with ALFWorld's demangler and expert."""

from __future__ import annotations

import random
import re
from typing import Any

from evoharness.envs.alfworld.catalog import AlfworldDataError, GameRecord, check_traj_file, load_game_file
from evoharness.envs.alfworld.facts import facts_from_propositions
from evoharness.envs.base import StepResult, WorldFacts

NOTHING_HAPPENS = "Nothing happens."
_OBJECTIVE_RE = re.compile(r"Your task is to: (.*)$", re.MULTILINE)


def objective_from_intro(text: str) -> str:
    """The task sentence of ALFWorld's welcome text ("put a clean apple in fridge.")."""
    match = _OBJECTIVE_RE.search(text)
    return match.group(1).strip() if match else ""


class TextWorldAlfworldEnv:
    """One ALFWorld game on the reference engine. Loading is slow (seconds); reset is cheap, so reuse it.

    With ``expert=True`` every result carries the handcoded expert's next command (``expert_plan``);
    the expert is random unless seeded, so :meth:`reset` seeds Python's ``random`` with ``seed``.
    """

    engine = "textworld"

    def __init__(self, game: GameRecord, expert: bool = False) -> None:
        import textworld
        from alfworld.agents.environment.alfred_tw_env import AlfredDemangler, AlfredExpert, AlfredInfos

        self.game = game
        self.expert = expert
        load_game_file(game.game_path)  # a clear error for a corrupt file before textworld's own
        request = textworld.EnvInfos(
            won=True, admissible_commands=True, facts=True, feedback=True, extras=["gamefile", "expert_plan"]
        )
        wrappers: list[Any] = [AlfredDemangler(), AlfredInfos]
        if expert:
            check_traj_file(game.traj_path)
            wrappers.append(AlfredExpert)
        try:
            self._env = textworld.start(str(game.game_path), request, wrappers=wrappers)
        except Exception as exc:  # textworld raises many types for a broken game; name the file
            raise AlfworldDataError(f"The ALFWorld engine could not load {game.game_path}: {exc!r}") from exc
        self._state: Any = None
        self._objective = ""

    def reset(self, seed: int | None = None) -> StepResult:
        if seed is not None:
            random.seed(seed)
        self._state = self._env.reset()
        self._objective = objective_from_intro(self._state["feedback"])
        return self._result(valid=True)

    def step(self, command: str) -> StepResult:
        if self._state is None:
            raise RuntimeError("step() before reset()")
        admissible = command in self._state["admissible_commands"]
        self._state, _, _ = self._env.step(command)
        return self._result(valid=admissible)

    def facts(self) -> WorldFacts:
        if self._state is None:
            raise RuntimeError("facts() before reset()")
        return facts_from_propositions(self._state["facts"])

    def close(self) -> None:
        self._env.close()

    def _result(self, valid: bool) -> StepResult:
        state = self._state
        won = bool(state["won"])
        plan = tuple(state.get("extra.expert_plan") or ()) if self.expert else None
        return StepResult(
            observation=state["feedback"],
            admissible_commands=tuple(state["admissible_commands"]),
            objective=self._objective,
            won=won,
            done=won or bool(state["lost"]),
            score=1.0 if won else 0.0,
            valid=valid,
            expert_plan=plan,
        )
