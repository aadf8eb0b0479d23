"""Experience: a skill bank of categorised entries with usage counts, plus the episode's note buffer.

``recall [q]`` returns the top-k entries per category by keyword overlap with the query (ties broken by
usage, then id) and increments their usage. ``note [x]`` only buffers; notes reach the bank at
consolidation, never during an episode (the bank is frozen within a batch).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from enum import StrEnum
from functools import cache
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, Field


class Category(StrEnum):
    GENERAL = "general_skills"
    TASK = "task_skills"
    MISTAKES = "common_mistakes"
    SEARCH = "search_priorities"
    NOTES = "notes"


CATEGORY_CAPS: dict[Category, int] = {
    Category.GENERAL: 8,
    Category.TASK: 12,
    Category.MISTAKES: 8,
    Category.SEARCH: 40,
    Category.NOTES: 20,
}

_STOPWORDS = {"a", "an", "the", "to", "in", "on", "of", "and", "it", "is", "for", "some", "with", "then", "put", "find"}
_WORD_RE = re.compile(r"[a-z]+")


def keywords(text: str) -> set[str]:
    return {w for w in _WORD_RE.findall(text.lower()) if w not in _STOPWORDS and len(w) > 1}


class ExperienceEntry(BaseModel):
    """One skill. ``key`` is what the entry is about (a task type, an object type) and matches strongly."""

    entry_id: str
    category: Category
    text: str
    key: str = ""
    usage: int = 0


class ExperienceBankData(BaseModel):
    """The serialised bank (one frozen version)."""

    bank_id: str = "seed"
    version: int = 0
    entries: list[ExperienceEntry] = Field(default_factory=list)


def load_bank_file(path: Path) -> ExperienceBankData:
    """A bank version stored as YAML (parsed once per process; treat the result as frozen)."""
    return _parse_bank_file(path.resolve())


@cache
def _parse_bank_file(path: Path) -> ExperienceBankData:
    return ExperienceBankData.model_validate(yaml.load(path.read_text(), Loader=_YAML_LOADER))


_YAML_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


@dataclass
class ExperienceBank:
    """The bank an episode recalls from, and the notes it buffers."""

    data: ExperienceBankData
    top_k: int = 3
    notes: list[str] = field(default_factory=list)

    @classmethod
    def from_file(cls, path: str | Path, top_k: int = 3) -> ExperienceBank:
        """A fresh bank (own usage counts) from a YAML file; the file is parsed once per process."""
        return cls.fresh(load_bank_file(Path(path)), top_k=top_k)

    @classmethod
    def fresh(cls, frozen: ExperienceBankData, top_k: int = 3) -> ExperienceBank:
        """A bank for one episode: a private copy of a frozen version (usage counts start from it)."""
        return cls(frozen.model_copy(deep=True), top_k=top_k)

    @property
    def version_label(self) -> str:
        return f"{self.data.bank_id}@v{self.data.version}"

    def recall(self, query: str) -> str:
        words = keywords(query)
        lines: list[str] = []
        for category in Category:
            scored = []
            for entry in self.data.entries:
                if entry.category != category:
                    continue
                overlap = len(words & keywords(entry.text)) + 3 * len(words & keywords(entry.key))
                if overlap:
                    scored.append((-overlap, -entry.usage, entry.entry_id, entry))
            for *_, entry in sorted(scored)[: self.top_k]:
                entry.usage += 1
                lines.append(f"[{category.value}] {entry.text}")
        buffered = [note for note in self.notes if words & keywords(note)]
        lines.extend(f"[episode note] {note}" for note in buffered[-self.top_k:])
        return "\n".join(lines) if lines else f"No experience matches '{query}'."

    def note(self, text: str) -> str:
        self.notes.append(text)
        return f"Noted ({len(self.notes)} buffered for consolidation)."

    def render(self) -> str:
        counts = {c: sum(e.category == c for e in self.data.entries) for c in Category}
        summary = ", ".join(f"{c.value} {n}" for c, n in counts.items() if n)
        notes = f"; {len(self.notes)} notes buffered" if self.notes else ""
        return f"bank {self.version_label}: {summary or 'empty'}{notes} (use recall [query] to read it)"

    def usage_snapshot(self) -> dict[str, Any]:
        return {e.entry_id: e.usage for e in self.data.entries if e.usage}
