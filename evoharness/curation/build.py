"""Build a curated SFT dataset: select episodes, limit lengths, split by game, save, record a ``datasets`` row.

The dataset is a ``datasets.DatasetDict`` (train, validation) in conversational format: ``messages`` =
system, user (the per-turn BPE prompt) and assistant (the ``<think>…</think><action>…</action>`` target).
"""

from __future__ import annotations

import hashlib
import json
from collections import Counter, defaultdict
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from evoharness.consolidation.store import insert_rows
from evoharness.curation.config import CurationConfig
from evoharness.curation.guard import assert_train_only
from evoharness.curation.select import Candidate, select_episodes
from evoharness.curation.tokens import token_counter
from evoharness.lineage import code_version
from warehouse import Warehouse


@dataclass(frozen=True)
class DatasetResult:
    dataset_id: str
    path: str
    n_train: int
    n_validation: int
    composition: dict[str, Any]
    dropped: dict[str, int]
    bank_version: int
    reused: bool


def _fraction(game_id: str) -> float:
    return int(hashlib.sha256(game_id.encode()).hexdigest()[:8], 16) / 2**32


def split_games(game_ids: set[str], validation_fraction: float) -> dict[str, str]:
    """Game → 'train' | 'validation' by a stable hash (never by step); one validation game at least."""
    split = {g: "validation" if _fraction(g) < validation_fraction else "train" for g in game_ids}
    if validation_fraction > 0 and len(game_ids) > 1 and "validation" not in split.values():
        split[min(game_ids, key=_fraction)] = "validation"
    return split


def curate(wh: Warehouse, config: CurationConfig, run_id: str) -> DatasetResult:
    """Build (or find, when identical) the dataset for ``config`` and record it in ``datasets``."""
    import datasets

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
    records: dict[str, list[dict[str, Any]]] = {"train": [], "validation": []}
    for row in ex_rows:
        ex = dict(zip(ex_columns, row))
        if count(ex["system_prompt"]) + count(ex["user_prompt"]) + count(ex["target"]) > config.max_tokens:
            dropped["examples over max_tokens"] = dropped.get("examples over max_tokens", 0) + 1
            continue
        records[by_split[ex["game_id"]]].append({
            "messages": [{"role": "system", "content": ex["system_prompt"]},
                         {"role": "user", "content": ex["user_prompt"]},
                         {"role": "assistant", "content": ex["target"]}],
            "episode_id": ex["episode_id"], "game_id": ex["game_id"], "task_type": ex["task_type"],
            "teacher": ex["teacher"], "consolidator": ex["consolidator"], "turn": ex["turn"], "kind": ex["kind"],
            "bank_version": ex["bank_version"], "turn_vars": ex["turn_vars"],
        })
    keys = sorted((r["episode_id"], r["turn"]) for part in records.values() for r in part)
    content_sha = hashlib.sha256(json.dumps([keys, config.model_dump(exclude={"output_dir"})]).encode()).hexdigest()
    existing = wh.con.execute("SELECT dataset_id, path, n_train, n_validation, composition, dropped, bank_version "
                              "FROM datasets WHERE name = ? AND content_sha = ?", [config.name, content_sha]).fetchone()
    if existing and Path(existing[1]).is_dir():
        return DatasetResult(existing[0], existing[1], existing[2], existing[3], json.loads(existing[4]),
                             json.loads(existing[5]), existing[6], reused=True)
    version = 1 + wh.scalar("SELECT coalesce(max(version), 0) FROM datasets WHERE name = ?", [config.name])
    dataset_id = f"{config.name}@v{version}"
    root = Path(config.output_dir) if config.output_dir else wh.path.parent / "datasets"
    path = (root / config.name / f"v{version}").resolve()
    # an empty split is left out: datasets cannot load a split saved with no rows
    dataset = datasets.DatasetDict({name: datasets.Dataset.from_list(part) for name, part in records.items() if part})
    dataset.save_to_disk(str(path))
    composition = _composition(records, chosen)
    bank = wh.con.execute(
        "SELECT bank_id, max(version) FROM experience_banks WHERE frozen GROUP BY bank_id ORDER BY 2 DESC LIMIT 1"
    ).fetchone()
    if bank is None:
        raise ValueError("No frozen Experience bank in the warehouse: run `evoharness consolidate` first.")
    bank_id, bank_version = bank
    example_banks = sorted({r["bank_version"] for part in records.values() for r in part})
    games = Counter(r["game_id"] for part in records.values() for r in part)
    with wh.transaction():
        insert_rows(wh, "datasets", [{
            "dataset_id": dataset_id, "name": config.name, "version": version, "content_sha": content_sha,
            "path": str(path), "teacher": config.teacher, "consolidator": config.consolidator,
            "n_train": len(records["train"]), "n_validation": len(records["validation"]),
            "n_episodes": len(chosen), "n_games": len(games), "composition": json.dumps(composition),
            "dropped": json.dumps(dropped), "bank_id": bank_id, "bank_version": bank_version,
            "example_bank_versions": json.dumps(example_banks),
            "source_episodes": [c.episode_id for c in chosen],
            "consolidation_runs": json.dumps(sorted({c.consolidation_run_id for c in chosen})),
            "config": config.model_dump_json(), "created_at": datetime.now(UTC), "code_version": code_version(),
            "run_id": run_id,
        }])
        insert_rows(wh, "dataset_games", [
            {"dataset_id": dataset_id, "game_id": g, "dataset_split": by_split[g], "examples": n}
            for g, n in sorted(games.items())
        ])
    return DatasetResult(dataset_id, str(path), len(records["train"]), len(records["validation"]), composition,
                         dropped, bank_version, reused=False)


def newest_dataset(wh: Warehouse, teacher: str) -> tuple[str, str]:
    """(dataset_id, path) of the teacher's newest curated dataset."""
    row = wh.con.execute("SELECT dataset_id, path FROM datasets WHERE teacher = ? ORDER BY created_at DESC LIMIT 1",
                         [teacher]).fetchone()
    if row is None:
        raise LookupError(f"No curated dataset for teacher {teacher!r}: materialize sft_dataset (or run "
                          "`evoharness curate`) first.")
    return row[0], row[1]


def _composition(records: dict[str, list[dict[str, Any]]], chosen: list[Candidate]) -> dict[str, Any]:
    examples: dict[str, Counter[str]] = defaultdict(Counter)
    for split, part in records.items():
        for r in part:
            examples["task_type"][r["task_type"]] += 1
            examples["teacher"][r["teacher"]] += 1
            examples["kind"][r["kind"]] += 1
            examples["split"][split] += 1
    composition: dict[str, Any] = {key: dict(sorted(c.items())) for key, c in examples.items()}
    composition["episodes_by_task_type"] = dict(sorted(Counter(c.task_type for c in chosen).items()))
    composition["episodes_by_source_mode"] = dict(sorted(Counter(c.source_mode for c in chosen).items()))
    return composition
