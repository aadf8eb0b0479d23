"""Migration drift: an applied migration must be byte-identical to its file.

``schema_version`` stores the sha256 of every migration when it was applied. Opening a warehouse compares
each stored sha256 with the file's; a difference (a migration edited after it was applied, or an applied
migration whose file is gone) is a :class:`MigrationDriftError` naming the migration, never a silent pass.

Two edits happened before this check existed, both to ``policy_evaluation`` and both superseded by
``031_metric_definitions.sql``, which redefines that view from scratch: the first ``027`` text (without
the step-budget split) and ``029_policy_evaluation_budget.sql`` (folded into ``027``, file removed).
Warehouses that applied those exact texts open normally; their ``schema_version`` rows stay as they were
(the record of what ran). Any other difference is an error. Never add to this list to silence an edit:
add a new migration instead.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class AcceptedDrift:
    """An applied text that differs from today's file (or whose file is gone) and is known to be harmless."""

    name: str
    sha256: str
    superseded_by: str
    reason: str


ACCEPTED_DRIFT: tuple[AcceptedDrift, ...] = (
    AcceptedDrift("027_policy_evaluation.sql",
                  "a03a93e808794b7d8a49797b3002718f8e5d530e32f966e9d76add82f28c9c10",
                  "031_metric_definitions.sql",
                  "first text of the view (no max_steps split), edited in place before this check existed"),
    AcceptedDrift("029_policy_evaluation_budget.sql",
                  "fed59dbef22fb2d1831c5e0c6dbf344d540a8a1e341fd0704f6d89d1f12bd585",
                  "031_metric_definitions.sql",
                  "folded into 027 and its file removed before this check existed"),
)


class MigrationDriftError(RuntimeError):
    """An applied migration differs from its file (or its file is gone)."""


def accepted(name: str, sha256: str) -> bool:
    return any(a.name == name and a.sha256 == sha256 for a in ACCEPTED_DRIFT)


def check_drift(path: object, applied: list[tuple[int, str, str]], files: dict[int, tuple[str, str]]) -> None:
    """``applied``: (version, name, sha256) rows of ``schema_version``; ``files``: version → (name, sha256).
    Raises :class:`MigrationDriftError` listing every applied migration that no longer matches."""
    problems = []
    for version, name, sha in applied:
        current = files.get(version)
        if current is None:
            if not accepted(name, sha):
                problems.append(f"{name} (version {version}) was applied but its file is gone")
        elif current != (name, sha) and not accepted(name, sha):
            problems.append(f"{name} (version {version}) was applied with sha256 {sha[:12]} but the file "
                            f"{current[0]} now has sha256 {current[1][:12]}")
    if problems:
        raise MigrationDriftError(
            f"Warehouse {path}: applied migrations differ from warehouse/migrations: {'; '.join(problems)}. "
            "Migrations are never edited after they are applied: restore the file and add a new migration "
            "with the change."
        )
