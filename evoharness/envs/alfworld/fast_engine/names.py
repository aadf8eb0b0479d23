"""Display names ("alarmclock 2") for ALFWorld's mangled ids, exactly as ALFWorld's ``Demangler`` does."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable


def _base_name(entity_id: str) -> str | None:
    splits = entity_id.split("_bar_", 1)
    if len(splits) == 1:
        return None
    name = splits[0]
    if "basin" in entity_id:
        name += "basin"
    return name


def demangle_all(entity_ids: Iterable[str]) -> dict[str, str]:
    """Map every id to its display name: ids sharing a class are numbered from the last in sorted order.

    Mirrors ``alfworld.agents.utils.misc.Demangler`` (no shuffle): ids without ``_bar_`` keep their text
    followed by a space ("agent1 ").
    """
    ids = sorted(set(entity_ids))
    counts: Counter[str] = Counter()
    for entity_id in ids:
        base = _base_name(entity_id)
        if base is not None:
            counts[base] += 1
    next_number = dict(counts)
    names: dict[str, str] = {}
    for entity_id in ids:
        base = _base_name(entity_id)
        if base is None:
            text = (
                entity_id.replace("_bar_", "|").replace("_minus_", "-").replace("_plus_", "+")
                .replace("_dot_", ".").replace("_comma_", ",")
            )
            names[entity_id] = f"{text} "
        else:
            names[entity_id] = f"{base} {next_number[base]}"
            next_number[base] -= 1
    return names
