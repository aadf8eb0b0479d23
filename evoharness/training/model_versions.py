"""Model versions: students trained by SFT (from a dataset, named by id) or GRPO (from an SFT version, named
by id), recorded in ``model_versions`` with the dataset id and parent version they came from.

A version id hashes what determines the training (dataset or parent version, and settings), so asking again
for the same training returns the stored version instead of training twice.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from evoharness.consolidation.bank import load_bank
from evoharness.lineage import code_version
from evoharness.training.grpo import GRPOSettings, train_grpo
from evoharness.training.sft import SFTSettings, train_sft
from evoharness.training.trainer_utils import LogCallback
from warehouse import Warehouse

SUMMARY_FIELDS = ("model_version", "stage", "parent_version", "dataset_id", "base_model", "train_examples",
                  "validation_examples", "steps", "train_loss", "eval_loss", "parameters", "seconds", "prompt_set",
                  "tokens_seen")


@dataclass
class ModelVersion:
    """A stored student: its ``model_versions`` row (JSON columns decoded); ``reused`` when nothing was trained."""

    row: dict[str, Any]
    reused: bool

    @property
    def model_version(self) -> str:
        return str(self.row["model_version"])

    @property
    def path(self) -> str:
        return str(self.row["path"])

    def summary(self) -> dict[str, Any]:
        """The version's headline numbers as one flat row (tables, asset metadata)."""
        return {k: self.row[k] for k in SUMMARY_FIELDS}


METRICS_ONLY_SETTINGS = frozenset({"decision_turns"})
"""Settings that change what is measured during training, never the weights: not part of a version's id."""


def version_id(teacher: str, stage: str, source: str, settings: SFTSettings | GRPOSettings) -> str:
    payload = json.dumps([source, settings.model_dump(mode="json", exclude=set(METRICS_ONLY_SETTINGS))],
                         sort_keys=True)
    return f"{teacher}-{stage}-{hashlib.sha256(payload.encode()).hexdigest()[:12]}"


JSON_COLUMNS = ("settings", "loss_history", "eval_history", "rollout_history", "decision_history")


def _decoded(row: dict[str, Any]) -> dict[str, Any]:
    return {k: json.loads(v) if k in JSON_COLUMNS and isinstance(v, str) else v for k, v in row.items()}


def stored_version(wh: Warehouse, model_version: str) -> ModelVersion | None:
    """The stored version, or None if unknown or its files are gone (then it is trained again)."""
    cursor = wh.con.execute("SELECT * FROM model_versions WHERE model_version = ?", [model_version])
    found = cursor.fetchone()
    if found is None:
        return None
    row = _decoded(dict(zip([d[0] for d in cursor.description], found, strict=True)))
    return ModelVersion(row, reused=True) if Path(row["path"]).is_dir() else None


def _store(wh: Warehouse, row: dict[str, Any]) -> ModelVersion:
    row = row | {"created_at": datetime.now(UTC).replace(tzinfo=None), "code_version": code_version()}
    encoded = {k: json.dumps(v) if k in JSON_COLUMNS[1:] else v for k, v in row.items()}
    with wh.transaction():
        wh.con.execute("DELETE FROM model_versions WHERE model_version = ?", [row["model_version"]])
        wh.insert("model_versions", [encoded])
    return ModelVersion(_decoded(encoded), reused=False)


def dataset_source(wh: Warehouse, dataset_id: str) -> tuple[str, str]:
    """(teacher, path) of a curated dataset, by id."""
    row = wh.con.execute("SELECT teacher, path FROM datasets WHERE dataset_id = ?", [dataset_id]).fetchone()
    if row is None:
        raise LookupError(f"Unknown dataset {dataset_id!r}: curate it first (sft_dataset / `evoharness curate`).")
    return str(row[0]), str(row[1])


def teacher_datasets(wh: Warehouse, teacher: str) -> list[str]:
    """The teacher's curated dataset ids, newest first (for people choosing one; pipelines pass ids)."""
    return [r[0] for r in wh.con.execute("SELECT dataset_id FROM datasets WHERE teacher = ? "
                                         "ORDER BY created_at DESC, version DESC", [teacher]).fetchall()]


def teacher_sft_versions(wh: Warehouse, teacher: str) -> list[str]:
    """The teacher's SFT model versions, newest first (for people choosing one; pipelines pass ids)."""
    return [r[0] for r in wh.con.execute("SELECT model_version FROM model_versions WHERE teacher = ? "
                                         "AND stage = 'sft' ORDER BY created_at DESC", [teacher]).fetchall()]


def train_sft_version(wh: Warehouse, dataset_id: str, settings: SFTSettings, models_root: str | Path, run_id: str,
                      on_log: LogCallback | None = None) -> ModelVersion:
    """Train (or reuse) the SFT student of the dataset ``dataset_id``. The warehouse is released while
    training runs, so other stages can write meanwhile."""
    teacher, dataset_path = dataset_source(wh, dataset_id)
    model_version = version_id(teacher, "sft", dataset_id, settings)
    if (stored := stored_version(wh, model_version)) is not None:
        return stored
    wh.release()
    result = train_sft(dataset_path, Path(models_root) / model_version, settings, on_log=on_log)
    return _store(wh, {
        "model_version": model_version, "stage": "sft", "teacher": teacher, "dataset_id": dataset_id,
        "parent_version": None, "base_model": settings.base_model, "path": result.model_dir,
        "settings": settings.model_dump_json(), "train_examples": result.train_examples,
        "validation_examples": result.validation_examples, "steps": result.steps, "train_loss": result.train_loss,
        "eval_loss": result.eval_loss, "parameters": result.parameters, "seconds": result.seconds,
        "loss_history": result.loss_history, "eval_history": result.eval_history, "rollout_history": None,
        "decision_history": result.decision_history, "tokens_seen": result.tokens_seen,
        "prompt_set": settings.prompt_set or f"alfworld/{settings.view}", "run_id": run_id,
    })


def train_grpo_version(wh: Warehouse, parent_version: str, settings: GRPOSettings, models_root: str | Path,
                       run_id: str, on_log: LogCallback | None = None, data_root: str | None = None,
                       engine: str | None = None) -> ModelVersion:
    """Train (or reuse) GRPO from ``parent_version``, recalling from the bank version of its dataset."""
    parent = stored_version(wh, parent_version)
    if parent is None:
        raise LookupError(f"Unknown model version {parent_version!r} (or its files are gone).")
    teacher = parent.row["teacher"]
    model_version = version_id(teacher, "grpo", parent_version, settings)
    if (stored := stored_version(wh, model_version)) is not None:
        return stored
    bank_row = wh.con.execute("SELECT bank_id, bank_version FROM datasets WHERE dataset_id = ?",
                              [parent.row["dataset_id"]]).fetchone()
    if bank_row is None:
        raise LookupError(f"Dataset {parent.row['dataset_id']!r} of {parent_version!r} is not in the warehouse.")
    bank = load_bank(wh, *bank_row)
    wh.release()
    result = train_grpo(parent.path, Path(models_root) / model_version, settings, bank=bank, data_root=data_root,
                        engine=engine, on_log=on_log)
    losses = [(int(h["step"]), h["loss"]) for h in result.history if "loss" in h]
    return _store(wh, {
        "model_version": model_version, "stage": "grpo", "teacher": teacher, "dataset_id": parent.row["dataset_id"],
        "parent_version": parent_version, "base_model": parent.row["base_model"], "path": result.model_dir,
        "settings": settings.model_dump_json(), "train_examples": result.games, "validation_examples": 0,
        "steps": result.steps, "train_loss": losses[-1][1] if losses else None, "eval_loss": None,
        "parameters": result.parameters, "seconds": result.seconds, "loss_history": losses, "eval_history": [],
        "rollout_history": result.history, "decision_history": [], "tokens_seen": None,
        "prompt_set": parent.row.get("prompt_set"), "run_id": run_id,
    })
