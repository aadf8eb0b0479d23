"""Builds a policy from a teacher name. The offline ``expert`` is always available."""

from __future__ import annotations

from evoharness.harness.prompts import Mode
from evoharness.teachers.base import Policy
from evoharness.teachers.expert import ExpertTeacher

BUILTIN_TEACHERS: tuple[str, ...] = ("expert",)


def build_policy(teacher: str, mode: Mode) -> Policy:
    """The policy registered as ``teacher`` (only the built-in expert for now)."""
    if teacher == "expert":
        return ExpertTeacher(mode=mode)
    raise KeyError(f"Unknown teacher {teacher!r}; known: {', '.join(BUILTIN_TEACHERS)}.")
