"""The reference curation: per-episode Python loops, and near-duplicates found by comparing each episode with
every kept episode of its game (the library's path before the columnar one).

``curate_reference`` builds the same dataset as ``evoharness.curation.build.curate`` (the columnar path).
``tests/test_curation.py`` proves that both choose the same episodes and examples, and
``benchmarks/data_scale.py`` times them side by side. It lives here, not in the library, because only they use it.
"""

from __future__ import annotations

import hashlib
import math
from collections import Counter
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from evoharness.curation.build import DatasetResult

from evoharness.curation.config import CurationConfig
from evoharness.curation.guard import assert_train_only
from evoharness.curation.tokens import token_counter
from warehouse import Warehouse


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
    stable_key: str | None = None


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
    played = Counter(c.task_type for c in candidates if c.catalog_split == "train" and c.split == "train")
    cap = config.max_per_task_type
    if cap is None and unique:
        cap = math.ceil(config.balance_factor * min(played.values()))
    taken: Counter[str] = Counter()
    for c in sorted(unique, key=lambda c: _stable(c.episode_id)):
        if cap is not None and taken[c.task_type] >= cap:
            selection.dropped["task-type balance cap"] += 1
            continue
        taken[c.task_type] += 1
        selection.chosen.append(c)
    selection.chosen.sort(key=lambda c: (c.game_id, c.episode_id))
    return selection


def curate_reference(wh: Warehouse, config: CurationConfig, run_id: str) -> DatasetResult:
    """Today's path end to end: candidates as Python objects, :func:`select_episodes`, then one Python dict per
    example (token count per text), recorded like the columnar path."""
    import polars as pl

    from evoharness.curation.build import record_dataset, split_games

    columns, rows = wh.query("curation_candidates", teacher=config.teacher, consolidator=config.consolidator)
    candidates = [Candidate(**dict(zip(columns, row))) for row in rows]
    selection = select_episodes(candidates, config)
    chosen = selection.chosen
    assert_train_only((c.game_id, c.catalog_split) for c in chosen)
    dropped: dict[str, int] = dict(selection.dropped)
    by_split = split_games({c.game_id for c in chosen}, config.validation_fraction)
    ex_columns, ex_rows = wh.query("curation_examples", episode_ids=[c.episode_id for c in chosen],
                                   consolidator=config.consolidator)
    count = token_counter(config.tokenizer)
    records: list[dict[str, Any]] = []
    for row in ex_rows:
        ex = dict(zip(ex_columns, row))
        if count(ex["system_prompt"]) + count(ex["user_prompt"]) + count(ex["target"]) > config.max_tokens:
            dropped["examples over max_tokens"] = dropped.get("examples over max_tokens", 0) + 1
            continue
        records.append({
            "messages": [{"role": "system", "content": ex["system_prompt"]},
                         {"role": "user", "content": ex["user_prompt"]},
                         {"role": "assistant", "content": ex["target"]}],
            "episode_id": ex["episode_id"], "game_id": ex["game_id"], "task_type": ex["task_type"],
            "teacher": ex["teacher"], "consolidator": ex["consolidator"], "turn": ex["turn"], "kind": ex["kind"],
            "bank_version": ex["bank_version"], "turn_vars": ex["turn_vars"],
            "consolidation_run_id": ex["consolidation_run_id"],
            "dataset_split": by_split[ex["game_id"]],
        })
    schema: dict[str, pl.DataType | type[pl.DataType]] = {"messages": pl.List(pl.Struct({"role": pl.String, "content": pl.String})), "episode_id": pl.String,
              "game_id": pl.String, "task_type": pl.String, "teacher": pl.String, "consolidator": pl.String,
              "turn": pl.Int32, "kind": pl.String, "bank_version": pl.Int32, "turn_vars": pl.String,
              "consolidation_run_id": pl.String,
              "dataset_split": pl.String}
    examples = pl.DataFrame(records, schema=schema)
    episodes = pl.DataFrame({"episode_id": [c.episode_id for c in chosen], "task_type": [c.task_type for c in chosen],
                             "source_mode": [c.source_mode for c in chosen]}, schema={
        "episode_id": pl.String, "task_type": pl.String, "source_mode": pl.String})
    return record_dataset(wh, config, run_id, examples, episodes, dropped)
