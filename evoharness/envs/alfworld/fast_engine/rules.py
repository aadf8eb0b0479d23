"""ALFWorld's actions on a :class:`State`: admissible commands, effects, and the feedback text.

The texts follow the game grammar rule by rule (first applicable alternative wins); lists are ordered as
textworld orders query results (facts sorted by their mangled ids) and joined like its ``display_list``.
"""

from __future__ import annotations

from evoharness.envs.alfworld.fast_engine.world import State, World

Action = tuple[str, ...]

NOTHING_HAPPENS = "Nothing happens."
HELP_TEXT = (
    "Available commands:\n"
    "  look:                             look around your current location\n"
    "  inventory:                        check your current inventory\n"
    "  go to (receptacle):               move to a receptacle\n"
    "  open (receptacle):                open a receptacle\n"
    "  close (receptacle):               close a receptacle\n"
    "  take (object) from (receptacle):  take an object from a receptacle\n"
    "  move (object) to (receptacle):  place an object in or on a receptacle\n"
    "  examine (something):              examine a receptacle or an object\n"
    "  use (object):                     use an object\n"
    "  heat (object) with (receptacle):  heat an object using a receptacle\n"
    "  clean (object) with (receptacle): clean an object using a receptacle\n"
    "  cool (object) with (receptacle):  cool an object using a receptacle\n"
    "  slice (object) with (object):     slice an object using a sharp object\n"
)


def display_list(items: list[str]) -> str:
    """textworld's list rendering: "nothing", "a", "a, and b", "a, b, and c"."""
    if not items:
        return "nothing"
    if len(items) == 1:
        return items[0]
    return ", ".join(items[:-1]) + ", and " + items[-1]


# --- admissible commands -------------------------------------------------------------------------------

def _goto_commands(world: World, loc: str) -> list[tuple[str, Action]]:
    cached = world.goto_commands.get(loc)
    if cached is None:
        cached = [
            (f"go to {world.names[r]}", ("goto", r))
            for r, r_loc in world.all_receps_sorted
            if r_loc != loc
        ]
        world.goto_commands[loc] = cached
    return cached


def applicable(state: State) -> dict[str, Action]:
    """Every admissible command mapped to the action it performs (first grounding wins, like textworld)."""
    world = state.world
    names = world.names
    loc = state.agent_at
    here = world.location_receps.get(loc, ())
    actions: dict[str, Action] = {"look": ("look",), "inventory": ("inventory",), "help": ("help",)}
    for command, action in _goto_commands(world, loc):
        actions.setdefault(command, action)
    openable = world.openable
    for r in here:
        rname = names[r]
        actions.setdefault(f"examine {rname}", ("examine_r", r))
        if r in openable:
            if r in state.opened:
                actions.setdefault(f"close {rname}", ("close", r))
            else:
                actions.setdefault(f"open {rname}", ("open", r))
        for o in state.by_recep.get(r, ()):
            if o in world.toggleable:
                actions.setdefault(f"use {names[o]}", ("use", o))
    if not state.holds:
        for r in here:
            if r in openable and r not in state.opened:
                continue
            rname = names[r]
            for o in state.by_recep.get(r, ()):
                if o in world.pickupable:
                    actions.setdefault(f"take {names[o]} from {rname}", ("take", o, r))
        return actions
    for o in state.holds:
        oname = names[o]
        otype = world.object_type.get(o)
        actions.setdefault(f"examine {oname}", ("examine_o", o))
        for r in here:
            rname = names[r]
            if (r not in openable or r in state.opened) and (world.recep_type.get(r), otype) in world.can_contain:
                actions.setdefault(f"move {oname} to {rname}", ("put", o, r))
            if o in world.cleanable and r in world.sinks:
                actions.setdefault(f"clean {oname} with {rname}", ("clean", o, r))
            if o in world.heatable and r in world.microwaves:
                actions.setdefault(f"heat {oname} with {rname}", ("heat", o, r))
            if o in world.coolable and r in world.fridges:
                actions.setdefault(f"cool {oname} with {rname}", ("cool", o, r))
        if o in world.knives:
            for co in state.by_loc.get(loc, ()):
                if co in world.sliceable and co != o:
                    actions.setdefault(f"slice {names[co]} with {oname}", ("slice", co, o))
    return actions


# --- texts ----------------------------------------------------------------------------------------------

def examine_receptacle_text(state: State, r: str) -> str:
    names = state.world.names
    rname = names[r]
    if r in state.world.openable:
        if r in state.opened:
            inside = display_list([f"a {names[o]}" for o in sorted(state.by_recep.get(r, ()))])
            return f"The {rname} is open. In it, you see {inside}."
        return f"The {rname} is closed."
    on = display_list([f"a {names[o]}" for o in sorted(state.by_recep.get(r, ()))])
    return f"On the {rname}, you see {on}."


def examine_object_text(state: State, o: str) -> str:
    world = state.world
    name = world.names[o]
    flags = state.flags
    clean, hot, cool, sliced = (o in flags["isclean"], o in flags["ishot"], o in flags["iscool"],
                                o in flags["issliced"])
    if o in world.receptacle_objects:
        inside = display_list([f"a {world.names[i]}" for i in world.inside_object.get(o, ()) if i != o])
        return f"This is a normal {name}. In it, you see {inside}."
    if clean and hot and sliced:
        return f"This is a hot and clean sliced {name}."
    if clean and cool and sliced:
        return f"This is a cool and clean sliced {name}."
    if clean and sliced:
        return f"This is a clean sliced {name}."
    if hot and sliced:
        return f"This is a hot sliced {name}."
    if cool and sliced:
        return f"This is a cool sliced {name}."
    if clean and hot:
        return f"This is a hot and clean {name}."
    if clean and cool:
        return f"This is a cool and clean {name}."
    if hot:
        return f"This is a hot {name}."
    if clean:
        return f"This is a clean {name}."
    if cool:
        return f"This is a cold {name}."
    if o in world.toggleable and o in flags["istoggled"]:
        return f"This {name} is on."
    if o in world.sliceable and sliced:
        return f"This is a sliced {name}."
    return f"There's nothing special about {name}."


def look_text(state: State, intro: bool = False) -> str:
    """``#look.feedback#``; ``intro`` renders it with an empty mapping, as the welcome text does."""
    world = state.world
    names = world.names
    loc = state.agent_at
    here = world.location_receps.get(loc, ())
    if here:
        facing = display_list([names[r] for r in here])
        floor = [
            f"a {names[o]}"
            for o in sorted(state.by_loc.get(loc, ()))
            for r in here
            if (o, r) in state.negated
        ]
        return f"You are facing the {facing}. Next to it, you see {display_list(floor)}."
    appliances = [f"a {names[r]}" for r, _ in world.all_receps_sorted] if intro else []
    return f"You are in the middle of a room. Looking quickly around you, you see {display_list(appliances)}."


def intro_text(state: State) -> str:
    return f"-= Welcome to TextWorld, ALFRED! =-\n\n{look_text(state, intro=True)}\n\n{state.world.task}"


def inventory_text(state: State) -> str:
    if state.holds:
        carried = display_list([f"a {state.world.names[o]}" for o in sorted(state.holds)])
        return f"You are carrying: {carried}."
    return "You are not carrying anything."


#: The predicates each action kind may change (the goal is re-tested only when one of them is in it).
TOUCHES: dict[str, frozenset[str]] = {
    "goto": frozenset({"atlocation"}),
    "take": frozenset({"inreceptacle", "objectatlocation", "holds", "holdsany"}),
    "put": frozenset({"inreceptacle", "objectatlocation", "holds", "holdsany"}),
    "open": frozenset({"opened", "checked"}),
    "close": frozenset({"opened"}),
    "look": frozenset({"checked"}),
    "examine_r": frozenset({"checked"}),
    "examine_o": frozenset({"checked"}),
    "inventory": frozenset({"checked"}),
    "help": frozenset({"checked"}),
    "use": frozenset({"istoggled", "ison"}),
    "clean": frozenset({"isclean"}),
    "heat": frozenset({"ishot", "iscool"}),
    "cool": frozenset({"iscool", "ishot"}),
    "slice": frozenset({"issliced"}),
}


# --- effects --------------------------------------------------------------------------------------------

def apply(state: State, action: Action) -> str:
    """Apply an applicable action and return its feedback text."""
    kind = action[0]
    names = state.world.names
    if kind == "goto":
        r = action[1]
        state.agent_at = state.world.recep_location[r]
        return f"You arrive at {names[r]}. {examine_receptacle_text(state, r)}"
    if kind == "take":
        o, r = action[1], action[2]
        state.remove_in(o, r)
        state.remove_at(o, state.agent_at)
        state.holds.add(o)
        return f"You pick up the {names[o]} from the {names[r]}."
    if kind == "put":
        o, r = action[1], action[2]
        state.add_in(o, r)
        state.add_at(o, state.agent_at)
        state.holds.discard(o)
        return f"You move the {names[o]} to the {names[r]}."
    if kind == "open":
        r = action[1]
        state.opened.add(r)
        state.checked.add(r)
        return f"You open the {names[r]}. {examine_receptacle_text(state, r)}"
    if kind == "close":
        state.opened.discard(action[1])
        return f"You close the {names[action[1]]}."
    if kind == "look":
        state.checked.add(state.agent_at)
        return look_text(state)
    if kind == "examine_r":
        state.checked.add(action[1])
        return examine_receptacle_text(state, action[1])
    if kind == "examine_o":
        state.checked.add(action[1])
        return examine_object_text(state, action[1])
    if kind == "inventory":
        return inventory_text(state)
    if kind == "help":
        return HELP_TEXT
    if kind == "use":
        o = action[1]
        state.flags["istoggled"].add(o)
        state.flags["ison"].discard(o)
        return f"You turn on the {names[o]}."
    if kind == "clean":
        state.flags["isclean"].add(action[1])
        return f"You clean the {names[action[1]]} using the {names[action[2]]}."
    if kind == "heat":
        state.flags["ishot"].add(action[1])
        state.flags["iscool"].discard(action[1])
        return f"You heat the {names[action[1]]} using the {names[action[2]]}."
    if kind == "cool":
        state.flags["iscool"].add(action[1])
        state.flags["ishot"].discard(action[1])
        return f"You cool the {names[action[1]]} using the {names[action[2]]}."
    if kind == "slice":
        state.flags["issliced"].add(action[1])
        return f"You sliced the {names[action[1]]} with the {names[action[2]]}."
    raise ValueError(f"Unknown action {action!r}")
