"""Model versions: students trained by SFT (from a dataset, named by id) or GRPO (from a parent version, named
by id), recorded in ``model_versions`` with the dataset id, parent version and recipe they came from.

A version id hashes what determines the training (dataset or parent version, and settings), so asking again
for the same training returns the stored version instead of training twice. Planning (``plan_*``) needs the
warehouse and no torch; the planned :class:`TrainingJob` is trained by :mod:`evoharness.training.realize`.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from evoharness.artifacts import artifact_problem
from evoharness.consolidation.bank import load_bank
from evoharness.errors import UnknownDatasetError, UnknownModelVersionError, UnknownParentVersionError
from evoharness.harness.experience import ExperienceBankData
from evoharness.lineage import code_version
from evoharness.training.grpo_config import GRPOSettings
from evoharness.training.sft_config import SFTSettings
from warehouse import Warehouse

SUMMARY_FIELDS = ("model_version", "stage", "parent_version", "dataset_id", "base_model", "recipe", "recipe_sha256",
                  "train_examples", "validation_examples", "steps", "train_loss", "eval_loss", "parameters", "seconds",
                  "prompt_set", "tokens_seen")


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
        return {k: self.row.get(k) for k in SUMMARY_FIELDS}


METRICS_ONLY_SETTINGS = frozenset({"decision_turns"})
"""Settings that change what is measured during training, never the weights: not part of a version's id."""


def version_id(teacher: str, stage: str, source: str, settings: SFTSettings | GRPOSettings) -> str:
    """What determines the training, hashed: settings that only change what is measured, and operational ones
    (checkpointing, micro-batch size, the generation server), are left out, so they never make a new version; so
    are switches added later while they are off (``ID_OMITTED_WHEN_OFF``), so versions trained before keep their id."""
    operational: frozenset[str] = getattr(settings, "OPERATIONAL", frozenset())
    exclude: dict[str, Any] = dict.fromkeys(METRICS_ONLY_SETTINGS | operational | _off(settings), True)
    for name in type(settings).model_fields:  # a nested model's later switches (GRPO's reward terms)
        nested = getattr(settings, name)
        if isinstance(nested, BaseModel) and _off(nested):
            exclude[name] = _off(nested)
    payload = json.dumps([source, settings.model_dump(mode="json", exclude=exclude)], sort_keys=True)
    return f"{teacher}-{stage}-{hashlib.sha256(payload.encode()).hexdigest()[:12]}"


def _off(settings: BaseModel) -> set[str]:
    """The model's ``ID_OMITTED_WHEN_OFF`` switches that are off (unset, 0, False)."""
    return {name for name in getattr(settings, "ID_OMITTED_WHEN_OFF", frozenset()) if not getattr(settings, name)}


JSON_COLUMNS = ("settings", "loss_history", "eval_history", "rollout_history", "decision_history", "recipe_overrides")


def _decoded(row: dict[str, Any]) -> dict[str, Any]:
    return {k: json.loads(v) if k in JSON_COLUMNS and isinstance(v, str) else v for k, v in row.items()}


def stored_version(wh: Warehouse, model_version: str) -> ModelVersion | None:
    """The stored version, or None if unknown or its folder is gone, incomplete or damaged (then it is trained
    again: the training resumes from its newest checkpoint and saves the folder anew)."""
    columns, rows = wh.query("model_version_row", model_version=model_version)
    if not rows:
        return None
    row = _decoded(dict(zip(columns, rows[0], strict=True)))
    return ModelVersion(row, reused=True) if artifact_problem(row["path"], "model") is None else None


def _store(wh: Warehouse, row: dict[str, Any]) -> ModelVersion:
    row = row | {"created_at": datetime.now(UTC).replace(tzinfo=None), "code_version": code_version()}
    encoded = {k: json.dumps(v) if k in JSON_COLUMNS[1:] else v for k, v in row.items()}
    with wh.transaction():
        wh.execute("model_version_delete", model_version=row["model_version"])
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
    recipe: dict[str, Any] = {}  # Recipe.stamp(): name, file sha256, overrides (recorded on the version)
    run_id: str


def dataset_source(wh: Warehouse, dataset_id: str) -> tuple[str, str]:
    """(teacher, path) of a curated dataset, by id."""
    row = wh.one("dataset_source", dataset_id=dataset_id)
    if row is None:
        raise UnknownDatasetError(dataset_id, "curate it first (sft_dataset / `evoharness curate`)")
    return str(row[0]), str(row[1])


def teacher_datasets(wh: Warehouse, teacher: str) -> list[str]:
    """The teacher's curated dataset ids, newest first (for people choosing one; pipelines pass ids)."""
    return [r[0] for r in wh.query("teacher_datasets", teacher=teacher)[1]]


def teacher_sft_versions(wh: Warehouse, teacher: str) -> list[str]:
    """The teacher's SFT model versions, newest first (for people choosing one; pipelines pass ids)."""
    return [r[0] for r in wh.query("teacher_sft_versions", teacher=teacher)[1]]


def continued_sft_settings(wh: Warehouse, parent_version: str, **overrides: Any) -> SFTSettings:
    """SFT settings that go on training ``parent_version``'s weights: its own settings (rendering, length,
    batch), its folder as the base model, and ``overrides`` (None values keep the parent's)."""
    parent = required_version(wh, parent_version, parent=True)
    given = {k: v for k, v in overrides.items() if v is not None}
    inherited = parent.row["settings"] | {"base_model": parent.path, "student_spec": None, "max_steps": None}
    return SFTSettings.model_validate(inherited | given)


def required_version(wh: Warehouse, model_version: str, parent: bool = False) -> ModelVersion:
    """The stored version, or a one-line error naming it (as the parent of a training when ``parent``)."""
    found = stored_version(wh, model_version)
    if found is None:
        raise (UnknownParentVersionError if parent else UnknownModelVersionError)(model_version)
    return found


def plan_sft_version(wh: Warehouse, dataset_id: str, settings: SFTSettings, models_root: str | Path,
                     run_id: str, parent_version: str | None = None, recipe: dict[str, Any] | None = None
                     ) -> ModelVersion | TrainingJob:
    """The stored SFT version of the dataset ``dataset_id`` with these settings, or the job that trains it.
    ``parent_version``: the version whose weights ``settings.base_model`` names (``continued_sft_settings``)."""
    teacher, dataset_path = dataset_source(wh, dataset_id)
    model_version = version_id(teacher, "sft", dataset_id, settings)
    if (stored := stored_version(wh, model_version)) is not None:
        return claimed(wh, stored, recipe)
    return TrainingJob(stage="sft", model_version=model_version, teacher=teacher, dataset_id=dataset_id,
                       source=dataset_path, parent_version=parent_version, base_model=settings.base_model,
                       output_dir=str(Path(models_root) / model_version), settings=settings.model_dump(mode="json"),
                       prompt_set=settings.prompt_set or f"alfworld/{settings.view}", recipe=recipe or {},
                       run_id=run_id)


def plan_grpo_version(wh: Warehouse, parent_version: str, settings: GRPOSettings, models_root: str | Path,
                      run_id: str, data_root: str | None = None, engine: str | None = None,
                      recipe: dict[str, Any] | None = None) -> ModelVersion | TrainingJob:
    """The stored GRPO version from ``parent_version`` with these settings, or the job that trains it (recalling
    from the bank version of the parent's dataset)."""
    parent = required_version(wh, parent_version, parent=True)
    teacher = parent.row["teacher"]
    model_version = version_id(teacher, "grpo", parent_version, settings)
    if (stored := stored_version(wh, model_version)) is not None:
        return claimed(wh, stored, recipe)
    bank_row = wh.one("dataset_bank", dataset_id=parent.row["dataset_id"])
    if bank_row is None:
        raise LookupError(f"Dataset {parent.row['dataset_id']!r} of {parent_version!r} is not in the warehouse.")
    return TrainingJob(stage="grpo", model_version=model_version, teacher=teacher,
                       dataset_id=parent.row["dataset_id"], source=parent.path, parent_version=parent_version,
                       base_model=parent.row["base_model"], output_dir=str(Path(models_root) / model_version),
                       settings=settings.model_dump(mode="json"), bank=load_bank(wh, *bank_row),
                       data_root=data_root, engine=engine, prompt_set=parent.row.get("prompt_set"),
                       recipe=recipe or {}, run_id=run_id)


def claimed(wh: Warehouse, version: ModelVersion, recipe: dict[str, Any] | None) -> ModelVersion:
    """``version``, recorded as realized by ``recipe`` (a ``Recipe.stamp()``; None or empty: no recipe): a recipe
    file that names a stored version again (its other sections or its comments changed) finds it as its own."""
    if recipe and recipe.get("recipe_sha256"):
        wh.execute("model_version_recipe_claim", model_version=version.model_version, recipe=recipe["recipe"],
                   recipe_sha256=recipe["recipe_sha256"],
                   recipe_overrides=json.dumps(list(recipe.get("recipe_overrides") or [])),
                   claimed_at=datetime.now(UTC).replace(tzinfo=None))
    return version


def store_training_result(wh: Warehouse, job: TrainingJob, result: dict[str, Any]) -> ModelVersion:
    """Record a finished job as a model version (claimed by the recipe that trained it)."""
    return claimed(wh, _store(wh, {
        "model_version": job.model_version, "stage": job.stage, "teacher": job.teacher, "dataset_id": job.dataset_id,
        "parent_version": job.parent_version, "base_model": job.base_model,
        "settings": json.dumps(job.settings, separators=(",", ":")), "run_id": job.run_id,
        "prompt_set": job.prompt_set, "recipe": job.recipe.get("recipe"),
        "recipe_sha256": job.recipe.get("recipe_sha256"), "recipe_overrides": job.recipe.get("recipe_overrides"),
    } | {k: result[k] for k in RESULT_FIELDS}), job.recipe)


RESULT_FIELDS = ("path", "train_examples", "validation_examples", "steps", "train_loss", "eval_loss", "parameters",
                 "seconds", "loss_history", "eval_history", "rollout_history", "decision_history", "tokens_seen")
