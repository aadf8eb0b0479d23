"""Turns the engine's PDDL propositions (display names after demangling) into :class:`WorldFacts`."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from typing import Any

from evoharness.envs.base import WorldFacts

# PDDL predicate (lower case, as textworld reports it) -> the flag name Belief uses.
FLAG_PREDICATES: dict[str, str] = {
    "ishot": "hot",
    "iscool": "cool",
    "isclean": "clean",
    "issliced": "sliced",
    "ison": "on",
    "istoggled": "on",
}


def facts_from_propositions(propositions: Iterable[Any]) -> WorldFacts:
    """Build ground truth from textworld ``Proposition`` objects (``.name`` and ``.arguments[i].name``)."""
    located: dict[str, set[str]] = defaultdict(set)
    holding: set[str] = set()
    opened: set[str] = set()
    flags: dict[str, set[str]] = defaultdict(set)
    receptacles_at: dict[str, set[str]] = defaultdict(set)
    agent_location: str | None = None
    for prop in propositions:
        name = prop.name.lower()
        args = [arg.name for arg in prop.arguments]
        if name == "inreceptacle":
            located[args[0]].add(args[1])
        elif name == "holds":
            holding.add(args[1])
        elif name == "opened":
            opened.add(args[0])
        elif name in FLAG_PREDICATES:
            flags[args[0]].add(FLAG_PREDICATES[name])
        elif name == "receptacleatlocation":
            receptacles_at[args[1]].add(args[0])
        elif name == "atlocation":
            agent_location = args[1]
    all_receptacles = frozenset(r for group in receptacles_at.values() for r in group)
    return WorldFacts(
        located={obj: frozenset(receptacles) for obj, receptacles in located.items()},
        holding=frozenset(holding),
        opened=frozenset(opened),
        flags={obj: frozenset(states) for obj, states in flags.items()},
        agent_near=frozenset(receptacles_at.get(agent_location, ())) if agent_location else frozenset(),
        receptacles=all_receptacles,
    )
