"""Episode selection: success and quality filters, exact and near-duplicate removal, task-type balance."""

from __future__ import annotations

import hashlib
import math
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from evoharness.curation.config import CurationConfig


@dataclass
class Candidate:
    episode_id: str
    game_id: str
    catalog_split: str | None
    split: str
    task_type: str
    teacher: str
    won: bool
    source_mode: str
    action_sig: str | None
    n_examples: int
    consolidation_run_id: str
    belief_precision: float | None
    belief_recall: float | None
    progress_validity: float | None
    parse_validity: float | None
    commands: list[str] | None


@dataclass
class Selection:
    chosen: list[Candidate]
    dropped: Counter[str] = field(default_factory=Counter)


def _stable(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


def _below(value: float | None, minimum: float) -> bool:
    """A metric that could not be computed (NULL) does not fail the episode: there was nothing to get wrong."""
    return value is not None and value < minimum


def _bigrams(commands: list[str]) -> set[tuple[str, str]]:
    return set(zip(["<start>", *commands], [*commands, "<end>"]))


def jaccard(a: set[Any], b: set[Any]) -> float:
    return len(a & b) / len(a | b) if a | b else 1.0


def select_episodes(candidates: list[Candidate], config: CurationConfig) -> Selection:
    """Apply the filters in order; ``dropped`` counts episodes removed per reason."""
    selection = Selection(chosen=[])
    kept: list[Candidate] = []
    for c in candidates:
        if c.catalog_split != "train" or c.split != "train":
            selection.dropped["not a train-split game"] += 1
        elif config.require_success and not c.won:
            selection.dropped["not successful"] += 1
        elif (_below(c.belief_precision, config.min_belief_precision)
              or _below(c.belief_recall, config.min_belief_recall)):
            selection.dropped["belief accuracy below threshold"] += 1
        elif _below(c.progress_validity, config.min_progress_validity):
            selection.dropped["progress validity below threshold"] += 1
        elif _below(c.parse_validity, config.min_parse_validity):
            selection.dropped["parse validity below threshold"] += 1
        else:
            kept.append(c)
    unique: list[Candidate] = []
    signatures: set[str] = set()
    for c in kept:
        if c.action_sig in signatures:
            selection.dropped["exact duplicate"] += 1
            continue
        grams = _bigrams(c.commands or [])
        if any(u.game_id == c.game_id and jaccard(grams, _bigrams(u.commands or [])) >= config.near_duplicate_jaccard
               for u in unique):
            selection.dropped["near duplicate"] += 1
            continue
        if c.action_sig:
            signatures.add(c.action_sig)
        unique.append(c)
    counts = Counter(c.task_type for c in unique)
    cap = config.max_per_task_type
    if cap is None and counts:
        cap = math.ceil(config.balance_factor * min(counts.values()))
    taken: Counter[str] = Counter()
    for c in sorted(unique, key=lambda c: _stable(c.episode_id)):
        if cap is not None and taken[c.task_type] >= cap:
            selection.dropped["task-type balance cap"] += 1
            continue
        taken[c.task_type] += 1
        selection.chosen.append(c)
    selection.chosen.sort(key=lambda c: (c.game_id, c.episode_id))
    return selection
