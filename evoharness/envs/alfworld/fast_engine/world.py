"""The static world of one ALFWorld game (parsed once) and its mutable state.

The semantics mirror what textworld's ``PddlEnv`` computes with Fast Downward for ALFWorld's domain:
which actions are applicable, which facts each action adds and deletes (including the ``not_*`` facts
textworld keeps for deleted atoms, which the look text depends on), and the goal test.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

from evoharness.envs.alfworld.fast_engine import goal as goal_eval
from evoharness.envs.alfworld.fast_engine.names import demangle_all
from evoharness.envs.alfworld.fast_engine.pddl import Problem, parse_problem, task_sentence

AGENT = "agent1"

# Static predicates (never changed by an action) that the engine indexes.
_STATIC = (
    "receptacleatlocation", "openable", "pickupable", "cleanable", "heatable", "coolable", "toggleable",
    "sliceable", "isreceptacleobject", "objecttype", "receptacletype", "cancontain", "inreceptacleobject",
)
_SINK_TYPES = frozenset({"sinktype", "sinkbasintype"})
_KNIFE_TYPES = frozenset({"knifetype", "butterknifetype"})
_FLAG_PREDICATES = ("isclean", "ishot", "iscool", "issliced", "ison", "istoggled")


@dataclass
class World:
    """Everything about a game that no action changes, indexed for fast queries."""

    names: dict[str, str]
    task: str
    goal: tuple
    init: list[tuple[str, tuple[str, ...]]]
    static: dict[str, set[tuple[str, ...]]]
    recep_location: dict[str, str]
    location_receps: dict[str, list[str]]  # receptacles at a location, sorted by id
    all_receps_sorted: list[tuple[str, str]]  # receptacleatlocation facts sorted (r, l)
    openable: frozenset[str]
    pickupable: frozenset[str]
    cleanable: frozenset[str]
    heatable: frozenset[str]
    coolable: frozenset[str]
    toggleable: frozenset[str]
    sliceable: frozenset[str]
    receptacle_objects: frozenset[str]
    object_type: dict[str, str]
    recep_type: dict[str, str]
    can_contain: frozenset[tuple[str, str]]
    inside_object: dict[str, list[str]]  # outer object -> inner objects (sorted), static
    sinks: frozenset[str]
    microwaves: frozenset[str]
    fridges: frozenset[str]
    knives: frozenset[str]
    goto_commands: dict[str, list[tuple[str, tuple[str, ...]]]] = field(default_factory=dict)  # loc -> (command, action)

    @classmethod
    def from_game(cls, data: dict) -> World:
        """Build the world from a parsed ``game.tw-pddl`` (call :func:`pddl.check_supported` first)."""
        problem: Problem = parse_problem(data["pddl_problem"])
        static: dict[str, set[tuple[str, ...]]] = defaultdict(set)
        entity_ids: set[str] = set()
        for pred, args in problem.init:
            entity_ids.update(args)
            if pred in _STATIC:
                static[pred].add(args)
        names = demangle_all(entity_ids)
        recep_location = {r: loc for r, loc in static["receptacleatlocation"]}
        location_receps: dict[str, list[str]] = defaultdict(list)
        for r, loc in sorted(static["receptacleatlocation"]):
            location_receps[loc].append(r)
        recep_type = {r: t for r, t in static["receptacletype"]}
        object_type = {o: t for o, t in static["objecttype"]}
        inside: dict[str, list[str]] = defaultdict(list)
        for inner, outer in sorted(static["inreceptacleobject"]):
            inside[outer].append(inner)

        def one(pred: str) -> frozenset[str]:
            return frozenset(args[0] for args in static[pred])

        world = cls(
            names=names,
            task=task_sentence(data["grammar"]),
            goal=problem.goal,
            init=problem.init,
            static=dict(static),
            recep_location=recep_location,
            location_receps=dict(location_receps),
            all_receps_sorted=sorted((r, loc) for r, loc in static["receptacleatlocation"]),
            openable=one("openable"),
            pickupable=one("pickupable"),
            cleanable=one("cleanable"),
            heatable=one("heatable"),
            coolable=one("coolable"),
            toggleable=one("toggleable"),
            sliceable=one("sliceable"),
            receptacle_objects=one("isreceptacleobject"),
            object_type=object_type,
            recep_type=recep_type,
            can_contain=frozenset((rt, ot) for rt, ot in static["cancontain"]),
            inside_object=dict(inside),
            sinks=frozenset(r for r, t in recep_type.items() if t in _SINK_TYPES),
            microwaves=frozenset(r for r, t in recep_type.items() if t == "microwavetype"),
            fridges=frozenset(r for r, t in recep_type.items() if t == "fridgetype"),
            knives=frozenset(o for o, t in object_type.items() if t in _KNIFE_TYPES),
        )
        return world

    def name(self, entity: str) -> str:
        return self.names[entity]


class State:
    """The dynamic facts of one game; the static ones live in :class:`World`."""

    __slots__ = (
        "agent_at",
        "by_loc",
        "by_recep",
        "checked",
        "flags",
        "holds",
        "inrec",
        "negated",
        "objloc",
        "opened",
        "world",
    )

    def __init__(self, world: World) -> None:
        self.world = world
        self.agent_at = ""
        self.inrec: set[tuple[str, str]] = set()
        self.by_recep: dict[str, set[str]] = defaultdict(set)
        self.objloc: set[tuple[str, str]] = set()
        self.by_loc: dict[str, set[str]] = defaultdict(set)
        self.opened: set[str] = set()
        self.holds: set[str] = set()
        self.flags: dict[str, set[str]] = {pred: set() for pred in _FLAG_PREDICATES}
        # textworld keeps a ``not_<pred>`` fact for every deleted atom; only not_inreceptacle is read back.
        self.negated: set[tuple[str, str]] = set()
        self.checked: set[str] = set()
        for pred, args in world.init:
            if pred == "atlocation":
                self.agent_at = args[1]
            elif pred == "inreceptacle":
                self.add_in(args[0], args[1])
            elif pred == "objectatlocation":
                self.add_at(args[0], args[1])
            elif pred == "opened":
                self.opened.add(args[0])
            elif pred == "holds":
                self.holds.add(args[1])
            elif pred in self.flags:
                self.flags[pred].add(args[0])

    # --- fact updates --------------------------------------------------------------------------------
    def add_in(self, obj: str, recep: str) -> None:
        self.inrec.add((obj, recep))
        self.by_recep[recep].add(obj)
        self.negated.discard((obj, recep))

    def remove_in(self, obj: str, recep: str) -> None:
        self.inrec.discard((obj, recep))
        self.by_recep[recep].discard(obj)
        self.negated.add((obj, recep))

    def add_at(self, obj: str, loc: str) -> None:
        self.objloc.add((obj, loc))
        self.by_loc[loc].add(obj)

    def remove_at(self, obj: str, loc: str) -> None:
        self.objloc.discard((obj, loc))
        self.by_loc[loc].discard(obj)

    # --- queries -------------------------------------------------------------------------------------
    def accessible(self, recep: str) -> bool:
        """``(or (not (openable r)) (opened r))``."""
        return recep not in self.world.openable or recep in self.opened

    def lookup(self, pred: str) -> set[tuple[str, ...]] | frozenset[tuple[str, ...]]:
        """All true facts of one predicate (for the goal test)."""
        if pred == "inreceptacle":
            return self.inrec  # type: ignore[return-value]
        if pred == "atlocation":
            return {(AGENT, self.agent_at)}
        if pred == "holds":
            return {(AGENT, obj) for obj in self.holds}
        if pred == "holdsany":
            return {(AGENT,)} if self.holds else set()
        if pred == "objectatlocation":
            return self.objloc  # type: ignore[return-value]
        if pred == "opened":
            return {(r,) for r in self.opened}
        if pred in self.flags:
            return {(o,) for o in self.flags[pred]}
        return self.world.static.get(pred, frozenset())

    def won(self) -> bool:
        return goal_eval.holds(self.world.goal, self.lookup)
