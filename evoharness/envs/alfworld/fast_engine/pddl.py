"""Parsing of ALFWorld ``game.tw-pddl`` files: the problem's objects, initial facts, goal, and task text.

Only the fixed ALFWorld domain and grammar are supported (every game of the official release shares
them); :func:`check_supported` refuses any other variant so the fast engine never silently diverges.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass, field
from typing import Any

from evoharness.envs.alfworld.catalog import AlfworldDataError

#: sha256 of the ALFWorld 2.1.1 PDDL domain every game ships with.
DOMAIN_SHA256 = "0af55e7f92d12b09d28515aa730e4d03fddd17228ef1fd7b18a3ee8ba49b27b9"
#: sha256 of the grammar with the task sentence blanked out.
GRAMMAR_SHA256 = "10da93e13b58e1a6039723f5d4a59ceae7c60772515bfab9fc603bafa7f8ee06"

_TASK_RE = re.compile(r'"rhs": "(Your task is to: (?:[^"\\]|\\.)*)"')
_FACT_RE = re.compile(r"\(([A-Za-z][\w-]*)((?:\s+[^\s()]+)*)\s*\)")
_OBJ_RE = re.compile(r"([^\s()]+)\s+-\s+([A-Za-z]\w*)")

Fact = tuple[str, tuple[str, ...]]


def _sha(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def check_supported(data: dict[str, Any], path: str = "<game>") -> None:
    """Raise :class:`AlfworldDataError` unless the game uses the ALFWorld domain and grammar."""
    if _sha(data["pddl_domain"]) != DOMAIN_SHA256:
        raise AlfworldDataError(f"{path}: unsupported PDDL domain for the fast engine; use engine='textworld'.")
    grammar = _TASK_RE.sub('"rhs": "Your task is to: "', data["grammar"])
    if _sha(grammar) != GRAMMAR_SHA256:
        raise AlfworldDataError(f"{path}: unsupported grammar for the fast engine; use engine='textworld'.")


def task_sentence(grammar: str) -> str:
    """The ``#task#`` text of the grammar ("Your task is to: ...")."""
    match = _TASK_RE.search(grammar)
    if not match:
        raise AlfworldDataError("The game's grammar has no task sentence.")
    return json.loads(f'"{match.group(1)}"')


# --- goal formulas -------------------------------------------------------------------------------------

Formula = tuple


@dataclass
class Problem:
    """The parsed PDDL problem: object types, initial facts (lower case), and the goal formula."""

    types: dict[str, str] = field(default_factory=dict)
    init: list[Fact] = field(default_factory=list)
    goal: Formula = ("and",)


def _tokenize(text: str) -> list[str]:
    return re.findall(r"\(|\)|[^\s()]+", text)


def _read_sexpr(tokens: list[str], pos: int) -> tuple[Any, int]:
    if tokens[pos] != "(":
        return tokens[pos], pos + 1
    items: list[Any] = []
    pos += 1
    while tokens[pos] != ")":
        item, pos = _read_sexpr(tokens, pos)
        items.append(item)
    return items, pos + 1


def _parse_params(items: list[str]) -> list[str]:
    """``?o - object ?r - receptacle`` (commas tolerated) -> ['o', 'r']."""
    names: list[str] = []
    for item in items:
        item = item.rstrip(",")
        if item.startswith("?"):
            names.append(item[1:].lower())
    return names


def _to_formula(sexpr: Any) -> Formula:
    """Convert an s-expression into nested tuples: ('and', ...), ('or', ...), ('not', f),
    ('exists', vars, f), ('=', a, b), ('atom', pred, args)."""
    head = sexpr[0].lower() if sexpr else "and"
    if head in ("and", "or"):
        return (head, *(_to_formula(s) for s in sexpr[1:]))
    if head == "not":
        return ("not", _to_formula(sexpr[1]))
    if head == "exists":
        return ("exists", tuple(_parse_params(sexpr[1])), _to_formula(sexpr[2]))
    args = tuple(a.lower() for a in sexpr[1:])
    if head == "=":
        return ("=", *args)
    return ("atom", head, args)


def parse_problem(text: str) -> Problem:
    """Parse an ALFWorld PDDL problem (objects, init, goal) with regular expressions and a tiny reader."""
    start_obj = text.find("(:objects")
    start_init = text.find("(:init")
    start_goal = text.find("(:goal")
    if min(start_obj, start_init, start_goal) < 0:
        raise AlfworldDataError("The PDDL problem lacks :objects, :init or :goal.")
    problem = Problem()
    for name, typ in _OBJ_RE.findall(text[start_obj + len("(:objects"):start_init]):
        problem.types[name.lower()] = typ.lower()
    for pred, args in _FACT_RE.findall(text[start_init + len("(:init"):start_goal]):
        problem.init.append((pred.lower(), tuple(args.lower().split())))
    tokens = _tokenize(text[start_goal:])
    goal_sexpr, _ = _read_sexpr(tokens, 0)
    problem.goal = _to_formula(goal_sexpr[1])
    return problem
