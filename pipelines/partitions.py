"""Partitions: one per teacher model (dynamic; registering a teacher adds its key)."""

from __future__ import annotations

import dagster as dg

TEACHER_PARTITIONS_NAME = "teacher"
DEFAULT_TEACHERS: tuple[str, ...] = ("expert",)

teacher_partitions = dg.DynamicPartitionsDefinition(name=TEACHER_PARTITIONS_NAME)


def register_teachers(instance: dg.DagsterInstance, names: tuple[str, ...] = DEFAULT_TEACHERS) -> list[str]:
    """Add teacher partition keys that the instance does not have yet; returns the keys added."""
    existing = set(instance.get_dynamic_partitions(TEACHER_PARTITIONS_NAME))
    new = [name for name in names if name not in existing]
    if new:
        instance.add_dynamic_partitions(TEACHER_PARTITIONS_NAME, new)
    return new
