"""The audit as data: read the SQL views, and judge a consolidator's quality against the thresholds."""

from __future__ import annotations

from dataclasses import dataclass

from evoharness.consolidation.config import QualityThresholds
from warehouse import Warehouse

AUDIT_VIEWS: tuple[str, ...] = (
    "audit_quality", "audit_belief", "audit_progress", "audit_parse", "audit_coverage", "audit_cost", "audit_bank",
)


def read_view(wh: Warehouse, view: str) -> tuple[list[str], list[tuple]]:
    if view not in AUDIT_VIEWS + ("audit_belief_by_aspect", "audit_unconsolidated"):
        raise ValueError(f"Unknown audit view {view!r}.")
    return wh.query("audit_view", view=view)


@dataclass(frozen=True)
class GateResult:
    passed: bool
    metrics: dict[str, float | None]
    failures: list[str]


def quality_gate(wh: Warehouse, teacher: str, consolidator: str, thresholds: QualityThresholds) -> GateResult:
    """Compare ``audit_quality`` for one teacher and consolidator with ``thresholds`` (a NULL metric fails)."""
    columns, rows = wh.query("audit_quality_for", teacher=teacher, consolidator=consolidator)
    if not rows:
        return GateResult(False, {}, [f"no consolidation of {teacher} by {consolidator}"])
    metrics = dict(zip(columns, rows[0]))
    failures = []
    for name, minimum in thresholds.model_dump().items():
        value = metrics.get(name)
        if value is None or value < minimum:
            failures.append(f"{name} {value if value is not None else 'NULL'} < {minimum}")
    return GateResult(not failures, {k: metrics.get(k) for k in thresholds.model_dump()}, failures)
