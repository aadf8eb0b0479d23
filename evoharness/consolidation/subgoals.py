"""The subgoal forms consolidators commit, and what "true in the engine state" means for each.

A subgoal is checked when a ``commit`` closes it, against the engine's facts at that turn:

| form | text | true when |
|---|---|---|
| take  | ``take a <type>`` or ``take <obj>`` | the agent holds an object of that type (or that object) |
| heat / cool / clean | ``heat <obj>`` | the object has the flag hot / cool / clean |
| light | ``light <obj> with <lamp>`` | the lamp is on and the agent holds the object |
| put   | ``put <obj> in <type or receptacle>`` | the object is in/on that receptacle (or one of that type) |

Any other text is ``unrecognized`` and never counts as true (it cannot be verified).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from evoharness.envs.base import WorldFacts

_OBJ = r"([a-z]+(?: \d+)?)"
_FORMS: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("take", re.compile(rf"^take (?:an? |the )?{_OBJ}$")),
    ("heat", re.compile(rf"^heat (?:the )?{_OBJ}$")),
    ("cool", re.compile(rf"^cool (?:the )?{_OBJ}$")),
    ("clean", re.compile(rf"^clean (?:the )?{_OBJ}$")),
    ("light", re.compile(rf"^light (?:the )?{_OBJ} with (?:the )?{_OBJ}$")),
    ("put", re.compile(rf"^put (?:the )?{_OBJ} (?:in|on|in/on) (?:an? |the )?{_OBJ}$")),
)
_FLAG = {"heat": "hot", "cool": "cool", "clean": "clean"}


@dataclass(frozen=True)
class SubgoalCheck:
    subgoal: str
    form: str
    holds: bool
    detail: str


def _matches(name: str, ref: str) -> bool:
    """'apple 1' matches 'apple 1' and the type 'apple'."""
    return name == ref or (not ref[-1].isdigit() and name.rsplit(" ", 1)[0] == ref)


def check_subgoal(text: str, facts: WorldFacts) -> SubgoalCheck:
    """Classify ``text`` into a form and evaluate it on ``facts``."""
    norm = " ".join(text.lower().split())
    for form, pattern in _FORMS:
        match = pattern.match(norm)
        if not match:
            continue
        if form == "take":
            held = [o for o in facts.holding if _matches(o, match.group(1))]
            return SubgoalCheck(text, form, bool(held), f"holding {sorted(facts.holding) or 'nothing'}")
        if form in _FLAG:
            obj = match.group(1)
            hits = [o for o, flags in facts.flags.items() if _matches(o, obj) and _FLAG[form] in flags]
            return SubgoalCheck(text, form, bool(hits), f"{_FLAG[form]} objects: {sorted(hits) or 'none'}")
        if form == "light":
            obj, lamp = match.groups()
            lit = [r for r, flags in facts.flags.items() if _matches(r, lamp) and "on" in flags]
            held = [o for o in facts.holding if _matches(o, obj)]
            return SubgoalCheck(text, form, bool(lit and held), f"lamps on: {lit or 'none'}; holding {held or 'nothing'}")
        obj, place = match.groups()
        where = [(o, r) for o, rs in facts.located.items() for r in sorted(rs) if _matches(o, obj) and _matches(r, place)]
        return SubgoalCheck(text, form, bool(where), f"placed: {where or 'no'}")
    return SubgoalCheck(text, "unrecognized", False, "not one of the verifiable subgoal forms")
