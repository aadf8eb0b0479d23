"""Build a curated SFT dataset: select episodes, limit lengths, split by game, save, record a ``datasets`` row.

Columnar throughout: candidates come from DuckDB as a polars frame (``curation.select``), the chosen
episodes' examples come back from DuckDB as one Arrow table (conversation, lineage ids, token estimate), and
the dataset is written from Arrow, atomically with a manifest (:mod:`evoharness.artifacts`). The dataset is
a ``datasets.DatasetDict`` (train, validation) in conversational format: ``messages`` = system, user (the
per-turn BPE prompt) and assistant (the ``<think>…</think><action>…</action>`` target). Lineage:
``dataset_examples`` names every example it holds, with the consolidation run that made it; the bank version
is the one those runs produced.
"""

from __future__ import annotations

import hashlib
import json
from collections import Counter
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import polars as pl
import pyarrow as pa

from evoharness.artifacts import artifact_problem, atomic_folder
from evoharness.consolidation.store import insert_rows
from evoharness.curation.config import CurationConfig
from evoharness.curation.guard import assert_train_only
from evoharness.curation.select import select_columnar
from evoharness.curation.tokens import token_counter
from evoharness.errors import MissingInputError
from evoharness.lineage import code_version
from warehouse import Warehouse, load_query

DATASET_COLUMNS = ("messages", "episode_id", "game_id", "task_type", "teacher", "consolidator", "turn", "kind",
                   "bank_version", "turn_vars")
"""The columns saved on disk, per example."""


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


def load_candidates(wh: Warehouse, config: CurationConfig) -> pl.DataFrame:
    """The ``curation_candidates`` query as a polars frame."""
    cursor = wh.con.execute(load_query("curation_candidates"),
                            {"teacher": config.teacher, "consolidator": config.consolidator})
    return cursor.pl()


def curate(wh: Warehouse, config: CurationConfig, run_id: str) -> DatasetResult:
    """Build (or find, when identical) the dataset for ``config`` and record it in ``datasets``."""
    selection = select_columnar(load_candidates(wh, config), config)
    chosen = selection.chosen
    assert_train_only(zip(chosen["game_id"].to_list(), chosen["catalog_split"].to_list(), strict=True))
    by_split = split_games(set(chosen["game_id"].to_list()), config.validation_fraction)
    relation = pa.table({"episode_id": chosen["episode_id"].to_arrow(),
                         "dataset_split": pa.array([by_split[g] for g in chosen["game_id"].to_list()])})
    wh.con.register("_chosen", relation)
    try:
        examples = wh.con.execute(load_query("curation_examples_chosen"), {"consolidator": config.consolidator}).pl()
    finally:
        wh.con.unregister("_chosen")
    if config.tokenizer is not None:
        count = token_counter(config.tokenizer)
        examples = examples.with_columns(pl.Series("estimated_tokens", [
            sum(count(m["content"]) for m in messages) for messages in examples["messages"].to_list()]))
    too_long = pl.col("estimated_tokens") > config.max_tokens
    dropped = selection.dropped.copy()
    over = int(examples.select(too_long.sum()).item())
    if over:
        dropped["examples over max_tokens"] += over
    examples = examples.filter(~too_long)
    episodes = chosen.select("episode_id", "task_type", "source_mode")
    return record_dataset(wh, config, run_id, examples, episodes, dict(dropped))


def record_dataset(wh: Warehouse, config: CurationConfig, run_id: str, examples: pl.DataFrame,
                   episodes: pl.DataFrame, dropped: dict[str, int], provenance: dict[str, Any] | None = None
                   ) -> DatasetResult:
    """Save ``examples`` (one row per example with ``dataset_split`` and lineage ids) as a dataset version and
    record it: ``datasets``, ``dataset_games``, ``dataset_examples``. An identical dataset is reused.
    ``provenance`` (a derived dataset's inputs, e.g. its base dataset) is recorded with the config. A stored
    dataset whose folder fails verification (:func:`evoharness.artifacts.verify_artifact`) is rebuilt in
    place, under its id."""
    # the consolidation run is part of a consolidated example's identity (a reconsolidated episode is new
    # content); a relabelled turn is its label, whichever run collected it (a resumed relabelling is two runs)
    identity = pl.col("consolidation_run_id")
    if "source_mode" in examples.columns:
        identity = (pl.when(pl.col("source_mode") == "relabel")
                    .then(pl.lit("label:") + pl.col("messages").list.last().struct.field("content"))
                    .otherwise(identity))
    keys = examples.select("episode_id", "turn", identity.alias("identity")).sort("episode_id", "turn").rows()
    recorded_config = config.model_dump(mode="json") | (provenance or {})
    content_sha = hashlib.sha256(json.dumps([[list(k) for k in keys], {
        k: v for k, v in recorded_config.items() if k != "output_dir"}]).encode()).hexdigest()
    existing = wh.one("dataset_by_content", name=config.dataset_name, content_sha=content_sha)
    parts = {name: examples.filter(pl.col("dataset_split") == name).select(DATASET_COLUMNS)
             for name in ("train", "validation")}
    if existing:  # the same content is stored: reuse its folder, or rebuild it in place if it is corrupt
        stored = DatasetResult(existing[0], existing[1], existing[2], existing[3], json.loads(existing[4]),
                               json.loads(existing[5]), existing[6], reused=True)
        if artifact_problem(stored.path, "dataset") is None:
            return stored
        save_dataset(parts, Path(stored.path))
        return replace(stored, reused=False)
    runs = sorted(set(examples["consolidation_run_id"].to_list()))
    bank = wh.con.execute(load_query("curation_bank"), {"runs": runs}).fetchone()
    if bank is None:
        raise MissingInputError("No frozen Experience bank for the chosen examples' consolidation runs: run "
                         "`evoharness consolidate` first.")
    bank_id, bank_version = bank
    version = wh.value("dataset_next_version", name=config.dataset_name)
    dataset_id = f"{config.dataset_name}@v{version}"
    root = Path(config.output_dir) if config.output_dir else wh.path.parent / "datasets"
    path = (root / config.dataset_name / f"v{version}").resolve()
    save_dataset(parts, path)
    composition = _composition(examples, episodes)
    games = examples.group_by("game_id", "dataset_split").len().sort("game_id")
    lineage = examples.select(pl.lit(dataset_id).alias("dataset_id"), "episode_id", "consolidator", "turn",
                              "dataset_split", "consolidation_run_id")
    with wh.transaction():
        insert_rows(wh, "datasets", [{
            "dataset_id": dataset_id, "name": config.dataset_name, "version": version, "content_sha": content_sha,
            "path": str(path), "teacher": config.teacher, "consolidator": config.consolidator,
            "n_train": parts["train"].height, "n_validation": parts["validation"].height,
            "n_episodes": episodes.height, "n_games": games.height, "composition": json.dumps(composition),
            "dropped": json.dumps(dropped), "bank_id": bank_id, "bank_version": bank_version,
            "example_bank_versions": json.dumps(sorted(set(examples["bank_version"].to_list()))),
            "source_episodes": episodes["episode_id"].to_list(), "consolidation_runs": json.dumps(runs),
            "config": json.dumps(recorded_config), "created_at": datetime.now(UTC), "code_version": code_version(),
            "run_id": run_id,
        }])
        insert_rows(wh, "dataset_games", [
            {"dataset_id": dataset_id, "game_id": g, "dataset_split": s, "examples": n} for g, s, n in games.rows()])
        wh.con.register("_lineage", lineage.to_arrow())
        try:
            wh.execute("dataset_examples_insert")
        finally:
            wh.con.unregister("_lineage")
    return DatasetResult(dataset_id, str(path), parts["train"].height, parts["validation"].height, composition,
                         dropped, bank_version, reused=False)


def save_dataset(parts: dict[str, pl.DataFrame], path: Path) -> None:
    """Save the splits as a ``datasets.DatasetDict`` folder at ``path``, atomically and with its manifest (an
    empty split is left out: datasets cannot load a split saved with no rows)."""
    import datasets

    with atomic_folder(path, "dataset") as folder:
        datasets.DatasetDict({name: datasets.Dataset(part.to_arrow()) for name, part in parts.items() if part.height}
                             ).save_to_disk(str(folder))


def _counts(frame: pl.DataFrame, column: str) -> dict[str, int]:
    return dict(sorted(Counter(frame[column].to_list()).items()))


def _composition(examples: pl.DataFrame, episodes: pl.DataFrame) -> dict[str, Any]:
    composition: dict[str, Any] = {}
    if examples.height:
        for key, column in (("task_type", "task_type"), ("teacher", "teacher"), ("kind", "kind"),
                            ("split", "dataset_split")):
            composition[key] = _counts(examples, column)
    composition["episodes_by_task_type"] = _counts(episodes, "task_type")
    composition["episodes_by_source_mode"] = _counts(episodes, "source_mode")
    return composition
