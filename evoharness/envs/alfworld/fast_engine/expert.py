"""ALFWorld's handcoded TextWorld expert (``HandCodedTWAgent``), driven by the fast engine.

It explores like ALFWorld's expert (same policies, same heuristics, same search). Differences from
``AlfredExpert`` on the real engine:

* one bug fix (``fix_move=True``, the default): ALFWorld's policies recognise a placement only by the word
  "put", but the TextWorld command is "move X to Y", so after the first placement the expert believes it
  still holds the object, proposes inadmissible commands and falls back to random ones (most of its
  pick_two failures). With the fix a successful "move" updates its inventory like "put" was meant to;
  ``fix_move=False`` reproduces ALFWorld's behaviour exactly;
* it draws from its own ``random.Random`` (seeded by the environment's reset) instead of the global one;
* the policies read only the facts they test (holds / inreceptacle / ishot / iscool / isclean, in sorted
  order) instead of re-rendering all ~700 propositions every step.
"""

from __future__ import annotations

import random
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

from evoharness.envs.alfworld.fast_engine.world import AGENT

if TYPE_CHECKING:
    from evoharness.envs.alfworld.fast_engine.env import FastAlfworldEnv

MAX_STEPS = 200
_READ_FLAGS = ("ishot", "iscool", "isclean")


@lru_cache(maxsize=2)
def _agent_class(fix_move: bool) -> Any:
    """A ``HandCodedTWAgent`` whose policies take their facts from ``game_state['fast_facts']``."""
    from alfworld.agents.expert import handcoded_expert_tw as tw
    from alfworld.agents.expert.handcoded_expert import BasePolicy

    def get_facts(self: Any, game_state: dict) -> list[str]:
        return game_state["fast_facts"]

    def update_state_tracking(self: Any, game_state: dict, last_action: str) -> None:
        if last_action.startswith("move ") and self.inventory:
            last_action = "put " + last_action[len("move "):]
        base_update(self, game_state, last_action)

    base_update = BasePolicy.update_state_tracking
    policies: dict[str, type] = {}
    for name in ("PickAndPlaceSimple", "PickTwoObjAndPlace", "LookAtObjInLight", "PickHeatThenPlaceInRecep",
                 "PickCoolThenPlaceInRecep", "PickCleanThenPlaceInRecep"):
        base = getattr(tw, f"{name}TWPolicy")
        members: dict[str, Any] = {"get_facts": get_facts}
        if fix_move:
            members["update_state_tracking"] = update_state_tracking
        policies[f"{name}TWPolicy"] = type(f"Fast{name}Policy", (base,), members)

    class FastHandCodedTWAgent(tw.HandCodedTWAgent):
        def get_task_policy(self, task_param: dict) -> type:
            task_class = task_param["task_type"].replace("_", " ").title().replace(" ", "") + "TWPolicy"
            return policies[task_class]

    return FastHandCodedTWAgent


def _fact_strings(env: FastAlfworldEnv) -> list[str]:
    """The facts the TW policies test, rendered like ``BasePolicy.get_facts`` renders propositions."""
    state = env.state
    names = env.world.names
    facts = [f"holds {AGENT} {names[o]}" for o in sorted(state.holds)]
    facts += [f"inreceptacle {names[o]} {names[r]}" for o, r in sorted(state.inrec)]
    for pred in _READ_FLAGS:
        facts += [f"{pred} {names[o]}" for o in sorted(state.flags[pred])]
    return facts


class FastExpert:
    """Next-command oracle: ``start`` on the welcome text, then ``next`` after every step."""

    def __init__(self, traj_path: Path, rng: random.Random, fix_move: bool = True) -> None:
        self._rng = rng
        self._agent = _agent_class(fix_move)(max_steps=MAX_STEPS)
        self._agent.reset(str(Path(traj_path).with_name("game.tw-pddl")))
        self.failed = False

    def start(self, intro: str) -> tuple[str, ...]:
        self._agent.observe(intro)
        return ("look",)

    def next(self, command: str, feedback: str, admissible: tuple[str, ...], won: bool,
             env: FastAlfworldEnv) -> tuple[str, ...]:
        """The expert's next command (``look`` when it has none, like ALFWorld's ``AlfredExpert``)."""
        if self.failed:
            return ("look",)
        from alfworld.agents.expert.handcoded_expert import HandCodedAgentFailed, HandCodedAgentTimeout

        game_state = {"feedback": feedback, "admissible_commands": list(admissible), "won": won,
                      "fast_facts": _fact_strings(env)}
        outer = random.getstate()
        random.setstate(self._rng.getstate())
        try:
            action = self._agent.act(game_state, 0, won, command)
        except (HandCodedAgentTimeout, HandCodedAgentFailed):
            self.failed = True
            return ("look",)
        finally:
            self._rng.setstate(random.getstate())
            random.setstate(outer)
        return (action,) if action in admissible else ("look",)

