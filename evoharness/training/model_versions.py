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

from pydantic import BaseModel

from evoharness.consolidation.bank import load_bank
from evoharness.harness.experience import ExperienceBankData
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
    """What determines the training, hashed: settings that only change what is measured, and operational ones
    (checkpointing, micro-batch size, the generation server), are left out, so they never make a new version; so
    are switches added later while they are off (``ID_OMITTED_WHEN_OFF``), so versions trained before keep their id."""
    operational: frozenset[str] = getattr(settings, "OPERATIONAL", frozenset())
    later = {name for name in getattr(settings, "ID_OMITTED_WHEN_OFF", frozenset()) if not getattr(settings, name)}
    payload = json.dumps([source, settings.model_dump(mode="json",
                                                      exclude=set(METRICS_ONLY_SETTINGS) | operational | later)],
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


class TrainingJob(BaseModel):
    """One training to run, everything it needs without the warehouse: it can run in another process or on
    another machine (``run_training_job``), and its result is stored by whoever holds the warehouse
    (``store_training_result``)."""

    stage: str  # "sft" | "grpo"
    model_version: str
    teacher: str
    dataset_id: str
    source: str  # the dataset folder (sft) or the parent model folder (grpo)
    parent_version: str | None = None
    base_model: str
    output_dir: str
    settings: dict[str, Any]
    bank: ExperienceBankData | None = None
    data_root: str | None = None
    engine: str | None = None
    prompt_set: str | None = None  # the rendering the student is trained with (recorded on the version)
    run_id: str


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


def continued_sft_settings(wh: Warehouse, parent_version: str, **overrides: Any) -> SFTSettings:
    """SFT settings that go on training ``parent_version``'s weights: its own settings (rendering, length,
    batch), its folder as the base model, and ``overrides`` (None values keep the parent's)."""
    parent = stored_version(wh, parent_version)
    if parent is None:
        raise LookupError(f"Unknown model version {parent_version!r} (or its files are gone).")
    given = {k: v for k, v in overrides.items() if v is not None}
    inherited = parent.row["settings"] | {"base_model": parent.path, "student_spec": None, "max_steps": None}
    return SFTSettings.model_validate(inherited | given)


def plan_sft_version(wh: Warehouse, dataset_id: str, settings: SFTSettings, models_root: str | Path,
                     run_id: str, parent_version: str | None = None) -> ModelVersion | TrainingJob:
    """The stored SFT version of the dataset ``dataset_id`` with these settings, or the job that trains it.
    ``parent_version``: the version whose weights ``settings.base_model`` names (``continued_sft_settings``)."""
    teacher, dataset_path = dataset_source(wh, dataset_id)
    model_version = version_id(teacher, "sft", dataset_id, settings)
    if (stored := stored_version(wh, model_version)) is not None:
        return stored
    return TrainingJob(stage="sft", model_version=model_version, teacher=teacher, dataset_id=dataset_id,
                       source=dataset_path, parent_version=parent_version, base_model=settings.base_model,
                       output_dir=str(Path(models_root) / model_version), settings=settings.model_dump(mode="json"),
                       prompt_set=settings.prompt_set or f"alfworld/{settings.view}", run_id=run_id)


def plan_grpo_version(wh: Warehouse, parent_version: str, settings: GRPOSettings, models_root: str | Path,
                      run_id: str, data_root: str | None = None, engine: str | None = None
                      ) -> ModelVersion | TrainingJob:
    """The stored GRPO version from ``parent_version`` with these settings, or the job that trains it (recalling
    from the bank version of the parent's dataset)."""
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
    return TrainingJob(stage="grpo", model_version=model_version, teacher=teacher,
                       dataset_id=parent.row["dataset_id"], source=parent.path, parent_version=parent_version,
                       base_model=parent.row["base_model"], output_dir=str(Path(models_root) / model_version),
                       settings=settings.model_dump(mode="json"), bank=load_bank(wh, *bank_row),
                       data_root=data_root, engine=engine, prompt_set=parent.row.get("prompt_set"), run_id=run_id)


def run_training_job(job: TrainingJob, on_log: LogCallback | None = None) -> dict[str, Any]:
    """Train ``job`` (in this process, or in each process of an ``accelerate launch``); the ``model_versions``
    fields it produced, JSON-ready."""
    if job.stage == "sft":
        sft = train_sft(job.source, job.output_dir, SFTSettings.model_validate(job.settings), on_log=on_log)
        return {"path": sft.model_dir, "train_examples": sft.train_examples,
                "validation_examples": sft.validation_examples, "steps": sft.steps, "train_loss": sft.train_loss,
                "eval_loss": sft.eval_loss, "parameters": sft.parameters, "seconds": sft.seconds,
                "loss_history": sft.loss_history, "eval_history": sft.eval_history, "rollout_history": None,
                "decision_history": sft.decision_history, "tokens_seen": sft.tokens_seen}
    grpo = train_grpo(job.source, job.output_dir, GRPOSettings.model_validate(job.settings), bank=job.bank,
                      data_root=job.data_root, engine=job.engine, on_log=on_log)
    losses = [(int(h["step"]), h["loss"]) for h in grpo.history if "loss" in h]
    return {"path": grpo.model_dir, "train_examples": grpo.games, "validation_examples": 0, "steps": grpo.steps,
            "train_loss": losses[-1][1] if losses else None, "eval_loss": None, "parameters": grpo.parameters,
            "seconds": grpo.seconds, "loss_history": losses, "eval_history": [], "rollout_history": grpo.history,
            "decision_history": [], "tokens_seen": None}


def store_training_result(wh: Warehouse, job: TrainingJob, result: dict[str, Any]) -> ModelVersion:
    """Record a finished job as a model version."""
    return _store(wh, {
        "model_version": job.model_version, "stage": job.stage, "teacher": job.teacher, "dataset_id": job.dataset_id,
        "parent_version": job.parent_version, "base_model": job.base_model,
        "settings": json.dumps(job.settings, separators=(",", ":")), "run_id": job.run_id,
        "prompt_set": job.prompt_set,
    } | {k: result[k] for k in RESULT_FIELDS})


RESULT_FIELDS = ("path", "train_examples", "validation_examples", "steps", "train_loss", "eval_loss", "parameters",
                 "seconds", "loss_history", "eval_history", "rollout_history", "decision_history", "tokens_seen")


def train_sft_version(wh: Warehouse, dataset_id: str, settings: SFTSettings, models_root: str | Path,
                      run_id: str, on_log: LogCallback | None = None, parent_version: str | None = None
                      ) -> ModelVersion:
    """Train (or reuse) the SFT student of the dataset ``dataset_id``. The warehouse is released while
    training runs, so other stages can write meanwhile."""
    planned = plan_sft_version(wh, dataset_id, settings, models_root, run_id, parent_version)
    if isinstance(planned, ModelVersion):
        return planned
    wh.release()
    return store_training_result(wh, planned, run_training_job(planned, on_log))


def train_grpo_version(wh: Warehouse, parent_version: str, settings: GRPOSettings, models_root: str | Path,
                       run_id: str, on_log: LogCallback | None = None, data_root: str | None = None,
                       engine: str | None = None) -> ModelVersion:
    """Train (or reuse) GRPO from ``parent_version``, recalling from the bank version of its dataset."""
    planned = plan_grpo_version(wh, parent_version, settings, models_root, run_id, data_root, engine)
    if isinstance(planned, ModelVersion):
        return planned
    wh.release()
    return store_training_result(wh, planned, run_training_job(planned, on_log))
