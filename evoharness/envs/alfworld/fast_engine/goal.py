"""Evaluation of PDDL goal formulas (and / or / not / exists / =) against a fact lookup."""

from __future__ import annotations

from collections.abc import Callable, Iterator

from evoharness.envs.alfworld.fast_engine.pddl import Formula

Lookup = Callable[[str], "set[tuple[str, ...]] | frozenset[tuple[str, ...]]"]
Binding = dict[str, str]


def _value(term: str, binding: Binding) -> str | None:
    if term.startswith("?"):
        return binding.get(term[1:])
    return term


def _is_ground(formula: Formula, binding: Binding) -> bool:
    kind = formula[0]
    if kind == "atom":
        return all(_value(t, binding) is not None for t in formula[2])
    if kind == "=":
        return all(_value(t, binding) is not None for t in formula[1:])
    return False


def _pick(formulas: list[Formula], binding: Binding) -> int:
    """Which conjunct to expand next: flatten ``and``s, then atoms (they bind), then ground tests."""
    for i, f in enumerate(formulas):
        if _is_ground(f, binding):
            return i
    for kinds in (("and",), ("atom",)):
        for i, f in enumerate(formulas):
            if f[0] in kinds:
                return i
    for i, f in enumerate(formulas):
        if f[0] == "exists":
            return i
    return 0


def _solve(formulas: list[Formula], binding: Binding, lookup: Lookup) -> Iterator[Binding]:
    """All extensions of ``binding`` satisfying every formula (a conjunction), found by backtracking."""
    if not formulas:
        yield binding
        return
    # Prefer positive atoms (they bind variables); test negations and equalities once ground.
    index = _pick(formulas, binding)
    formula, rest = formulas[index], formulas[:index] + formulas[index + 1:]
    kind = formula[0]
    if kind == "and":
        yield from _solve(list(formula[1:]) + rest, binding, lookup)
    elif kind == "exists":
        names = formula[1]
        saved = {name: binding[name] for name in names if name in binding}
        inner = {k: v for k, v in binding.items() if k not in names}
        for found in _solve([formula[2]], inner, lookup):
            merged = {k: v for k, v in found.items() if k not in names}
            merged.update(saved)
            yield from _solve(rest, merged, lookup)
    elif kind == "atom":
        terms = formula[2]
        if _is_ground(formula, binding):  # a membership test, no scan
            if tuple(_value(t, binding) for t in terms) in lookup(formula[1]):
                yield from _solve(rest, binding, lookup)
            return
        for fact in lookup(formula[1]):
            if len(fact) != len(terms):
                continue
            new = binding
            ok = True
            for term, value in zip(terms, fact):
                if term.startswith("?"):
                    bound = new.get(term[1:])
                    if bound is None:
                        if new is binding:
                            new = dict(binding)
                        new[term[1:]] = value
                    elif bound != value:
                        ok = False
                        break
                elif term != value:
                    ok = False
                    break
            if ok:
                yield from _solve(rest, new, lookup)
    elif kind == "=":
        if _value(formula[1], binding) == _value(formula[2], binding):
            yield from _solve(rest, binding, lookup)
    elif kind == "not":
        if not any(True for _ in _solve([formula[1]], binding, lookup)):
            yield from _solve(rest, binding, lookup)
    elif kind == "or":
        for option in formula[1:]:
            for found in _solve([option], binding, lookup):
                yield from _solve(rest, found, lookup)
                return
    else:
        raise ValueError(f"Unsupported goal formula {formula!r}")


def holds(goal: Formula, lookup: Lookup) -> bool:
    """Whether the closed formula ``goal`` is true for the facts ``lookup`` returns per predicate."""
    return any(True for _ in _solve([goal], {}, lookup))


def predicates(formula: Formula) -> frozenset[str]:
    """Every predicate a formula mentions."""
    if formula[0] == "atom":
        return frozenset({formula[1]})
    found: set[str] = set()
    for part in formula[1:]:
        if isinstance(part, tuple) and part and isinstance(part[0], str) and part[0] in (
                "and", "or", "not", "exists", "atom", "="):
            found |= predicates(part)
    return frozenset(found)
