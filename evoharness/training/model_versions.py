"""Model versions: a student trained from a teacher's newest dataset, recorded in ``model_versions``.

A version id is a hash of (dataset, settings), so asking again for the same training returns the stored
version instead of training twice; a new dataset or new settings make a new version.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path

from evoharness.lineage import code_version
from evoharness.training.sft import LogCallback, SFTResult, SFTSettings, train_sft
from warehouse import Warehouse


@dataclass
class ModelVersion:
    """A stored student (``reused``: it existed already, nothing was trained)."""

    model_version: str
    teacher: str
    dataset_id: str
    path: str
    result: SFTResult
    reused: bool


def newest_dataset(wh: Warehouse, teacher: str) -> tuple[str, str]:
    """(dataset_id, path) of the teacher's newest curated dataset."""
    row = wh.con.execute("SELECT dataset_id, path FROM datasets WHERE teacher = ? ORDER BY created_at DESC LIMIT 1",
                         [teacher]).fetchone()
    if row is None:
        raise LookupError(f"No curated dataset for teacher {teacher!r}: materialize sft_dataset (or run "
                          "`evoharness curate`) first.")
    return row[0], row[1]


def sft_version_id(teacher: str, dataset_id: str, settings: SFTSettings) -> str:
    payload = json.dumps([dataset_id, settings.model_dump(mode="json")], sort_keys=True)
    return f"{teacher}-sft-{hashlib.sha256(payload.encode()).hexdigest()[:12]}"


def _stored(wh: Warehouse, model_version: str) -> ModelVersion | None:
    cursor = wh.con.execute("SELECT * FROM model_versions WHERE model_version = ?", [model_version])
    row = cursor.fetchone()
    if row is None:
        return None
    data = dict(zip([d[0] for d in cursor.description], row, strict=True))
    if not Path(data["path"]).is_dir():
        return None  # the files are gone: train again
    result = SFTResult(
        model_dir=data["path"], base_model=data["base_model"], train_examples=data["train_examples"],
        validation_examples=data["validation_examples"], steps=data["steps"], train_loss=data["train_loss"],
        eval_loss=data["eval_loss"], seconds=data["seconds"], parameters=data["parameters"],
        loss_history=[tuple(x) for x in json.loads(data["loss_history"])],  # type: ignore[misc]
        eval_history=[tuple(x) for x in json.loads(data["eval_history"])],  # type: ignore[misc]
    )
    return ModelVersion(model_version, data["teacher"], data["dataset_id"], data["path"], result, reused=True)


def train_sft_version(wh: Warehouse, teacher: str, settings: SFTSettings, models_root: str | Path, run_id: str,
                      on_log: LogCallback | None = None) -> ModelVersion:
    """Train (or reuse) the SFT student of ``teacher``'s newest dataset; the warehouse is released while
    training runs, so other stages can write meanwhile."""
    dataset_id, dataset_path = newest_dataset(wh, teacher)
    model_version = sft_version_id(teacher, dataset_id, settings)
    stored = _stored(wh, model_version)
    if stored is not None:
        return stored
    wh.release()
    result = train_sft(dataset_path, Path(models_root) / model_version, settings, on_log=on_log)
    row = {
        "model_version": model_version, "stage": "sft", "teacher": teacher, "dataset_id": dataset_id,
        "parent_version": None, "base_model": settings.base_model, "path": result.model_dir,
        "settings": settings.model_dump_json(), "train_examples": result.train_examples,
        "validation_examples": result.validation_examples, "steps": result.steps, "train_loss": result.train_loss,
        "eval_loss": result.eval_loss, "parameters": result.parameters, "seconds": result.seconds,
        "loss_history": json.dumps(result.loss_history), "eval_history": json.dumps(result.eval_history),
        "created_at": datetime.now(UTC).replace(tzinfo=None), "code_version": code_version(), "run_id": run_id,
    }
    with wh.transaction():
        wh.con.execute("DELETE FROM model_versions WHERE model_version = ?", [model_version])
        wh.insert("model_versions", [row])
    return ModelVersion(model_version, teacher, dataset_id, result.model_dir, result, reused=False)


def summary_row(version: ModelVersion) -> dict[str, object]:
    """The version's numbers as one flat row (for tables and asset metadata)."""
    result = asdict(version.result)
    return {"model_version": version.model_version, "dataset_id": version.dataset_id,
            **{k: result[k] for k in ("base_model", "train_examples", "validation_examples", "steps", "train_loss",
                                      "eval_loss", "parameters", "seconds")}}
