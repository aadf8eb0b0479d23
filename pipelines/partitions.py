"""Partitions: one per teacher model and one per student model version (both dynamic)."""

from __future__ import annotations

import dagster as dg

TEACHER_PARTITIONS_NAME = "teacher"
DEFAULT_TEACHERS: tuple[str, ...] = ("expert",)

MODEL_VERSION_PARTITIONS_NAME = "model_version"

teacher_partitions = dg.DynamicPartitionsDefinition(name=TEACHER_PARTITIONS_NAME)
model_version_partitions = dg.DynamicPartitionsDefinition(name=MODEL_VERSION_PARTITIONS_NAME)


def register_teachers(instance: dg.DagsterInstance, names: tuple[str, ...] = DEFAULT_TEACHERS) -> list[str]:
    """Add teacher partition keys that the instance does not have yet; returns the keys added."""
    existing = set(instance.get_dynamic_partitions(TEACHER_PARTITIONS_NAME))
    new = [name for name in names if name not in existing]
    if new:
        instance.add_dynamic_partitions(TEACHER_PARTITIONS_NAME, new)
    return new


def reconcile_teachers(instance: dg.DagsterInstance, names: tuple[str, ...]) -> tuple[list[str], list[str]]:
    """Make the teacher partitions exactly ``names`` (the registry, the truth); returns (added, removed)."""
    existing = instance.get_dynamic_partitions(TEACHER_PARTITIONS_NAME)
    added = register_teachers(instance, names)
    removed = [name for name in existing if name not in names]
    for name in removed:
        instance.delete_dynamic_partition(TEACHER_PARTITIONS_NAME, name)
    return added, removed


def register_model_version(instance: dg.DagsterInstance, model_version: str) -> bool:
    """Add a trained model version's partition key (evaluation runs per version); True when it was new."""
    if instance.has_dynamic_partition(MODEL_VERSION_PARTITIONS_NAME, model_version):
        return False
    instance.add_dynamic_partitions(MODEL_VERSION_PARTITIONS_NAME, [model_version])
    return True
