"""Migration drift: an applied migration must be byte-identical to its file.

``schema_version`` stores the sha256 of every migration when it was applied. Opening a warehouse compares
each stored sha256 with the file's; a difference (a migration edited after it was applied, or an applied
migration whose file is gone) is a :class:`MigrationDriftError` naming the migration, never a silent pass.

Two kinds of applied text are accepted although they differ from today's file; warehouses that applied them
open normally and their ``schema_version`` rows stay as they were (the record of what ran):

* :data:`ACCEPTED_DRIFT`: two edits to ``policy_evaluation`` made before this check existed, the first ``027``
  text (without the step-budget split) and ``029_policy_evaluation_budget.sql`` (folded into ``027``, file
  removed); the view they defined is superseded.
* :data:`VIEWS_MOVED`: the texts of the migrations that also held view statements, before every view moved
  to ``warehouse/views/`` (``warehouse/view_files.py``). Their files now hold the same table statements
  without the views; ``tests/test_migrations.py`` checks that against the texts as applied.

Any other difference is an error. Never add to these lists to silence an edit: add a new migration instead.
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


VIEWS_MOVED_TO = "warehouse/views/"

VIEWS_MOVED: tuple[AcceptedDrift, ...] = tuple(
    AcceptedDrift(name, sha256, VIEWS_MOVED_TO, "view statements moved out, table statements unchanged")
    for name, sha256 in (
        ("001_core.sql", "78610a4272538b5a74af133e849d8c3658a2604d4de895fcdaac6ddff20e3331"),
        ("002_summary_views.sql", "b1a6ccb8a4f3936f479ba3bf41e6ceaad398782fd3d4c47ef7e1fb859ab9297f"),
        ("010_teachers.sql", "b590e5cec23a867c5ec1894c064eb72f08b069c9e22a761aa0f16d6933aacfe4"),
        ("021_audit_views.sql", "2e75e1d0c0c97e9a5a154f0c7ad9686269f0da630d3665d9ccf2326661239e8b"),
        ("022_curation.sql", "7f8435e5e8b8aa4a838840ccec2f3e4df3aab82e4427d74fb5997b95a54b9e5d"),
        ("023_audit_cost_with_bank_editor.sql", "de53216f2377f958232b60b8db7f8a0c718319fed7b7a2b6a27b138d43667066"),
        ("025_episode_attempts.sql", "7a5575ce780b2a102555b2ce9b0e4046e79440074c42b9ba596cf1ddbc2e1056"),
        ("027_policy_evaluation.sql", "5842557e87225cb5f6c0335670961a0d29d5226172d0bd2042dea42074c520c9"),
        ("031_metric_definitions.sql", "308fa525467e753d2bcac03231b35eec17513726a247d5812f5d1b7a81002ab6"),
        ("032_lineage_views.sql", "489643e244619ee1a6c35f86d61f7f34aa81d00ea50ec598cb319577247d46fb"),
        ("063_expert_labels.sql", "b59497ae30781744886667084aca870685be947520bf49166f5e96d27fd4d769"),
        ("064_training_rows.sql", "d287e7e0ed31ef479d06b8e5b9ca570d13b7d5717d7ba5c6c457f388cf62d1fe"),
        ("065_episode_repeats.sql", "fcfc7045d658d4ee6d8de51821e0ada94d43425d04e1b460f712d4729a3347b8"),
    )
)
"""Each migration that held view statements, with the sha256 of its text before they moved out."""


class MigrationDriftError(RuntimeError):
    """An applied migration differs from its file (or its file is gone)."""


def accepted(name: str, sha256: str) -> bool:
    return any(a.name == name and a.sha256 == sha256 for a in (*ACCEPTED_DRIFT, *VIEWS_MOVED))


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
