"""Builds a policy from a teacher name in the registry (``teachers.yaml``). ``expert`` is always there."""

from __future__ import annotations

from evoharness.harness.prompts import Mode
from evoharness.teachers.base import Policy
from evoharness.teachers.expert import ExpertTeacher
from evoharness.teachers.registry import Provider, TeacherRegistry

BUILTIN_TEACHERS: tuple[str, ...] = ("expert",)


def build_policy(teacher: str, mode: Mode, registry: TeacherRegistry | None = None) -> Policy:
    """The policy registered as ``teacher`` (KeyError if unknown; MissingCredentialsError if its key is unset)."""
    spec = (registry or TeacherRegistry.load()).get(teacher)
    if spec.provider is Provider.EXPERT:
        return ExpertTeacher(mode=mode, name=spec.name)
    from evoharness.teachers.clients import make_client
    from evoharness.teachers.llm import LLMTeacher

    return LLMTeacher(spec=spec, client=make_client(spec), mode=mode)
