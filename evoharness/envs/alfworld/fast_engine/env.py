"""``FastAlfworldEnv``: the native ALFWorld engine behind the :class:`Environment` protocol."""

from __future__ import annotations

import random
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING

from evoharness.envs.alfworld.catalog import AlfworldDataError, GameRecord, check_traj_file, load_game_file
from evoharness.envs.alfworld.facts import FLAG_PREDICATES
from evoharness.envs.alfworld.fast_engine import rules
from evoharness.envs.alfworld.fast_engine.goal import predicates as goal_predicates
from evoharness.envs.alfworld.fast_engine.pddl import check_supported
from evoharness.envs.alfworld.fast_engine.world import State, World
from evoharness.envs.alfworld.textworld_engine import objective_from_intro
from evoharness.envs.base import StepResult, WorldFacts

if TYPE_CHECKING:
    from evoharness.envs.alfworld.fast_engine.expert import FastExpert


@lru_cache(maxsize=256)
def load_world(game_path: str) -> World:
    """Parse a game file once per process (the world is immutable; states are built from it)."""
    data = load_game_file(Path(game_path))
    check_supported(data, game_path)
    try:
        return World.from_game(data)
    except (KeyError, ValueError, IndexError) as exc:
        raise AlfworldDataError(f"The fast engine could not parse {game_path}: {exc!r}") from exc


class FastAlfworldEnv:
    """One ALFWorld game on the native engine: same texts, commands, facts and scores as the real one.

    ``expert=True`` adds the expert's next command (``expert_plan``); the expert draws from its own
    ``random.Random`` seeded in :meth:`reset`, so runs are reproducible and never touch global state.
    """

    engine = "fast"

    def __init__(self, game: GameRecord, expert: bool = False) -> None:
        self.game = game
        self.expert = expert
        self.world = load_world(str(game.game_path))
        if expert:
            check_traj_file(game.traj_path)
        self._state: State | None = None
        self._actions: dict[str, rules.Action] = {}
        self._admissible: tuple[str, ...] = ()
        self._objective = ""
        self._expert: FastExpert | None = None
        self._won = False
        self._goal_predicates = goal_predicates(self.world.goal)

    # --- protocol ------------------------------------------------------------------------------------
    def reset(self, seed: int | None = None) -> StepResult:
        self._state = State(self.world)
        feedback = rules.intro_text(self._state)
        self._objective = objective_from_intro(feedback)
        self._refresh()
        won = self._won = self._state.won()
        plan = None
        if self.expert:
            from evoharness.envs.alfworld.fast_engine.expert import FastExpert

            expert = self._expert = FastExpert(self.game.traj_path, random.Random(seed))
            plan = expert.start(feedback)
        return self._result(feedback, True, won, plan)

    def step(self, command: str) -> StepResult:
        state = self._state
        if state is None:
            raise RuntimeError("step() before reset()")
        valid = command in self._actions
        action = self._actions.get(command.strip())
        if action is None:
            feedback = rules.NOTHING_HAPPENS
        else:
            feedback = rules.apply(state, action)
            if rules.TOUCHES[action[0]] & self._goal_predicates:
                self._won = state.won()
        self._refresh()
        won = self._won
        plan = None
        if self.expert and self._expert is not None:
            plan = self._expert.next(command, feedback, self._admissible, won, self)
        return self._result(feedback, valid, won, plan)

    def facts(self) -> WorldFacts:
        state = self._state
        if state is None:
            raise RuntimeError("facts() before reset()")
        names = self.world.names
        located: dict[str, set[str]] = {}
        for obj, recep in state.inrec:
            located.setdefault(names[obj], set()).add(names[recep])
        flags: dict[str, set[str]] = {}
        for pred, objs in state.flags.items():
            flag = FLAG_PREDICATES.get(pred)
            if flag is None:
                continue
            for obj in objs:
                flags.setdefault(names[obj], set()).add(flag)
        here = self.world.location_receps.get(state.agent_at, ())
        return WorldFacts(
            located={obj: frozenset(receps) for obj, receps in located.items()},
            holding=frozenset(names[o] for o in state.holds),
            opened=frozenset(names[r] for r in state.opened),
            flags={obj: frozenset(fl) for obj, fl in flags.items()},
            agent_near=frozenset(names[r] for r in here),
            receptacles=frozenset(names[r] for r in self.world.recep_location),
        )

    def close(self) -> None:
        self._state = None

    # --- extras --------------------------------------------------------------------------------------
    @property
    def state(self) -> State:
        if self._state is None:
            raise RuntimeError("state before reset()")
        return self._state

    def _refresh(self) -> None:
        assert self._state is not None
        self._actions = rules.applicable(self._state)
        self._admissible = tuple(sorted(self._actions))

    def _result(self, feedback: str, valid: bool, won: bool, plan: tuple[str, ...] | None) -> StepResult:
        return StepResult(
            observation=feedback,
            admissible_commands=self._admissible,
            objective=self._objective,
            won=won,
            done=won,
            score=1.0 if won else 0.0,
            valid=valid,
            expert_plan=plan,
        )
