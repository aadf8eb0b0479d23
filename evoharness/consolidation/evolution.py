"""Bank evolution: batch induction from many consolidated episodes → edits ADD / UPDATE / REMOVE / SKIP.

Induced entries (ids are stable so later batches UPDATE them):
- ``sp-<type>`` search priorities: object type → receptacle types where it was seen, with counts (merged
  with the previous version's counts);
- ``ts-<task type>`` task skills: the most common key-verb sequence of successful episodes;
- ``mk-*`` common mistakes: revisits, failures per task type;
- ``gs-*`` general skills: closed receptacles, step budget;
- notes: episode lessons; "<type> found in <receptacle>" merges into search priorities (SKIP), other
  lessons are ADDed unless they duplicate an entry (SKIP).
Categories over their cap lose their least-used entries (REMOVE). Usage counts carry over and add up.
"""

from __future__ import annotations

import hashlib
import re
import statistics
from collections import Counter
from dataclasses import asdict, dataclass, field
from typing import Any

from evoharness.consolidation.examples import EpisodeDigest
from evoharness.harness.experience import (
    CATEGORY_CAPS,
    Category,
    ExperienceBankData,
    ExperienceEntry,
    keywords,
)

_COUNTS_RE = re.compile(r"([a-z]+) \((\d+)\)")
_FOUND_RE = re.compile(r"^([a-z]+) (?:found|seen) (?:in|at|on) ([a-z]+)$")
_PAIR_RE = re.compile(r"(\d+) (?:of|/) ?(\d+)")
_KEY_VERBS = {"take", "heat", "cool", "clean", "use", "move", "slice"}
_TASK_LABEL = {
    "pick_and_place_simple": ("Put tasks", "put place"),
    "look_at_obj_in_light": ("Look-under-light tasks", "look light lamp"),
    "pick_clean_then_place_in_recep": ("Clean tasks", "clean"),
    "pick_heat_then_place_in_recep": ("Heat tasks", "heat"),
    "pick_cool_then_place_in_recep": ("Cool tasks", "cool"),
    "pick_two_obj_and_place": ("Two-object tasks", "two"),
}


@dataclass(frozen=True)
class Edit:
    op: str  # ADD | UPDATE | REMOVE | SKIP
    category: str
    entry_id: str | None
    text: str | None
    old_text: str | None
    reason: str
    evidence: int | None
    key: str = ""

    def row(self) -> dict[str, Any]:
        row = asdict(self)
        row.pop("key")
        return row


@dataclass(frozen=True)
class EpisodeEvidence:
    """One consolidated episode as induction input."""

    episode_id: str
    task_type: str
    won: bool
    target: str
    digest: EpisodeDigest
    lessons: list[str] = field(default_factory=list)


def _type(name: str) -> str:
    return name.rsplit(" ", 1)[0]


def _prior(bank: dict[str, ExperienceEntry], entry_id: str, needle: str = "") -> tuple[int, int]:
    """The cumulative "k of n" counts an induced entry carries in its text (0, 0 when absent)."""
    old = bank.get(entry_id)
    if old is None or needle not in old.text:
        return 0, 0
    match = _PAIR_RE.search(old.text)
    return (int(match.group(1)), int(match.group(2))) if match else (0, 0)


def _upsert(bank: dict[str, ExperienceEntry], category: Category, entry_id: str, key: str, text: str,
            reason: str, evidence: int) -> Edit | None:
    old = bank.get(entry_id)
    if old is None:
        return Edit("ADD", category.value, entry_id, text, None, reason, evidence, key)
    if old.text != text:
        return Edit("UPDATE", category.value, entry_id, text, old.text, reason, evidence, key)
    return None


def _search_edits(bank: dict[str, ExperienceEntry], batch: list[EpisodeEvidence]) -> list[Edit]:
    seen: dict[str, Counter[str]] = {}
    episodes: Counter[str] = Counter()
    for ep in batch:
        for obj_type in {_type(o) for o in ep.digest.sightings}:
            episodes[obj_type] += 1
        for obj, place in ep.digest.sightings.items():
            seen.setdefault(_type(obj), Counter())[_type(place)] += 1
    edits = []
    for obj_type, counts in sorted(seen.items()):
        old = bank.get(f"sp-{obj_type}")
        merged = Counter(counts)
        if old is not None:
            merged.update({r: int(n) for r, n in _COUNTS_RE.findall(old.text.split(":", 1)[1])})
        if sum(merged.values()) < 2:
            continue
        text = f"{obj_type}: " + ", ".join(f"{r} ({n})" for r, n in sorted(merged.items(), key=lambda kv: (-kv[1], kv[0]))[:6])
        edit = _upsert(bank, Category.SEARCH, f"sp-{obj_type}", obj_type, text,
                       f"{sum(counts.values())} sightings of {obj_type} in this batch", episodes[obj_type])
        if edit:
            edits.append(edit)
    return edits


def _pattern(verbs: list[str]) -> str:
    kept: list[str] = []
    for verb in verbs:
        if verb in _KEY_VERBS and (not kept or kept[-1] != verb):
            kept.append(verb)
    return " → ".join(kept)


def _task_edits(bank: dict[str, ExperienceEntry], batch: list[EpisodeEvidence]) -> list[Edit]:
    edits = []
    for task_type, (label, key) in _TASK_LABEL.items():
        episodes = [ep for ep in batch if ep.task_type == task_type]
        won = [ep for ep in episodes if ep.won]
        if len(won) >= 2:
            pattern, count = Counter(_pattern(ep.digest.verbs) for ep in won).most_common(1)[0]
            k, n = _prior(bank, f"ts-{task_type}", f": {pattern};")
            median = statistics.median(ep.digest.env_steps for ep in won)
            text = (f"{label}: {pattern}; {count + k}/{len(won) + n} successes followed this order "
                    f"(median {median:g} steps in the latest batch).")
            edit = _upsert(bank, Category.TASK, f"ts-{task_type}", key, text, f"{len(won)} successful episodes",
                           len(won))
            if edit:
                edits.append(edit)
        failed = len(episodes) - len(won)
        if failed:
            k, n = _prior(bank, f"mk-fail-{task_type}")
            text = (f"{label} failed {failed + k} of {len(episodes) + n} times by running out of steps; commit each "
                    f"object you place and track [{episodes[0].target}] before searching again.")
            edit = _upsert(bank, Category.MISTAKES, f"mk-fail-{task_type}", key, text, f"{failed} failures", failed)
            if edit:
                edits.append(edit)
    return edits


def _general_edits(bank: dict[str, ExperienceEntry], batch: list[EpisodeEvidence]) -> list[Edit]:
    edits: list[Edit | None] = []
    won = [ep for ep in batch if ep.won]
    if won:
        closed = sum(ep.digest.opened_before_take for ep in won)
        k, n = _prior(bank, "gs-closed")
        edits.append(_upsert(
            bank, Category.GENERAL, "gs-closed", "search open closed",
            f"The object was inside a closed receptacle in {closed + k} of {len(won) + n} successful episodes "
            f"({round(100 * (closed + k) / (len(won) + n))}%): open drawers, cabinets, the fridge and the "
            "microwave when searching.",
            f"{closed}/{len(won)} successes took the object from an opened receptacle", len(won)))
        median = statistics.median(ep.digest.env_steps for ep in won)
        edits.append(_upsert(
            bank, Category.GENERAL, "gs-steps", "budget steps plan",
            f"Successful episodes of the latest batch needed a median of {median:g} environment steps; commit "
            "subgoals to stay on plan.",
            f"median over {len(won)} successes", len(won)))
    revisits = [ep.digest.revisits for ep in batch]
    if revisits and statistics.mean(revisits) >= 1:
        edits.append(_upsert(
            bank, Category.MISTAKES, "mk-revisit", "revisit search",
            f"Going back to places already searched cost {statistics.mean(revisits):.1f} steps per episode; "
            "track [place] before returning.", f"{sum(revisits)} revisits", len(batch)))
    return [e for e in edits if e is not None]


def _lesson_edits(bank: dict[str, ExperienceEntry], batch: list[EpisodeEvidence]) -> list[Edit]:
    edits: list[Edit] = []
    added: dict[str, str] = {}
    for ep in batch:
        for lesson in ep.lessons + ep.digest.notes:
            text = " ".join(lesson.split())
            if match := _FOUND_RE.match(text.lower()):
                edits.append(Edit("SKIP", Category.NOTES.value, f"sp-{match.group(1)}", text, None,
                                  f"merged into search priority sp-{match.group(1)}", 1))
                continue
            words = keywords(text)
            duplicate = next((e.entry_id for e in list(bank.values()) if words and
                              len(words & keywords(e.text)) / len(words | keywords(e.text)) >= 0.5), None)
            duplicate = duplicate or next((i for t, i in added.items() if t == text.lower()), None)
            if duplicate:
                edits.append(Edit("SKIP", Category.NOTES.value, duplicate, text, None, f"duplicate of {duplicate}", 1))
                continue
            entry_id = "nt-" + hashlib.sha256(text.lower().encode()).hexdigest()[:8]
            added[text.lower()] = entry_id
            edits.append(Edit("ADD", Category.NOTES.value, entry_id, text, None, f"lesson from {ep.episode_id}", 1,
                              " ".join(sorted(words)[:4])))
    return edits


def _cap_edits(entries: dict[str, ExperienceEntry]) -> list[Edit]:
    edits = []
    for category, cap in CATEGORY_CAPS.items():
        members = [e for e in entries.values() if e.category == category]
        overflow = len(members) - cap
        for entry in sorted(members, key=lambda e: (e.usage, e.entry_id))[:max(overflow, 0)]:
            edits.append(Edit("REMOVE", category.value, entry.entry_id, None, entry.text,
                              f"{category.value} over its cap of {cap}; least used ({entry.usage})", None))
    return edits


def lessons_of(batch: list[EpisodeEvidence]) -> list[str]:
    """The batch's lessons and buffered notes, whitespace-normalised, in order, without repeats."""
    return list(dict.fromkeys(" ".join(text.split()) for ep in batch for text in ep.lessons + ep.digest.notes))


def evolve(parent: ExperienceBankData, batch: list[EpisodeEvidence], usage: dict[str, int],
           lesson_edits: list[Edit] | None = None) -> tuple[ExperienceBankData, list[Edit]]:
    """Propose and apply the edits of one batch; the result is ``parent.version + 1`` (usage added).

    Search priorities, task skills and general skills are induced from the batch's statistics; lessons
    become edits by rules unless ``lesson_edits`` (e.g. an LLM editor's proposal) are given.
    """
    entries = {e.entry_id: e.model_copy() for e in parent.entries}
    for entry_id, used in usage.items():
        if entry_id in entries:
            entries[entry_id].usage += used
    edits = _search_edits(entries, batch) + _task_edits(entries, batch) + _general_edits(entries, batch)
    edits += _lesson_edits(entries, batch) if lesson_edits is None else lesson_edits
    for edit in edits:
        if edit.op == "ADD" and edit.entry_id and edit.text:
            entries[edit.entry_id] = ExperienceEntry(entry_id=edit.entry_id, category=Category(edit.category),
                                                     text=edit.text, key=edit.key)
        elif edit.op == "UPDATE" and edit.entry_id in entries and edit.text:
            entries[edit.entry_id].text = edit.text
        elif edit.op == "REMOVE" and edit.entry_id:
            entries.pop(edit.entry_id, None)
    removals = _cap_edits(entries)
    for edit in removals:
        entries.pop(edit.entry_id or "", None)
    new = ExperienceBankData(bank_id=parent.bank_id, version=parent.version + 1, entries=list(entries.values()))
    return new, edits + removals
