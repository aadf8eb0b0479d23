"""How Dagster runs share the instance and the warehouse: the ``dagster.yaml`` that ``evoharness init`` writes, and
the retry policy of every step that writes the warehouse.

Warehouse writers are not queued by the instance (no concurrency pool): each stage holds the DuckDB file only
around its writes and waits for another process's write (``$EVOHARNESS_LOCK_WAIT_S``, ``warehouse.db``); a step
whose wait expired fails with one line naming the holder and is retried on :data:`WAREHOUSE_RETRY`'s schedule (every
stage resumes where it stopped). Why not a pool: docs/concurrency.md.
"""

from __future__ import annotations

from pathlib import Path

import dagster as dg
import yaml

INSTANCE_CONFIG: dict[str, object] = {
    "telemetry": {"enabled": False},
    # the warehouse's "waited N s for the file" lines appear in the run's log, beside the step that waited
    "python_logs": {"managed_python_loggers": ["warehouse.db"], "python_log_level": "INFO"},
}
"""What ``dagster.yaml`` holds; everything else is Dagster's default (SQLite storage under ``$DAGSTER_HOME``)."""

WAREHOUSE_RETRY = dg.RetryPolicy(max_retries=3, delay=30, backoff=dg.Backoff.EXPONENTIAL)
"""The schedule of a step's retries after its warehouse wait expired (``assets.failures`` requests them for that
failure only; it is no step's retry policy, which Dagster would apply to any error and to an interrupt): after 30, 90
and 210 s, each attempt waiting ``$EVOHARNESS_LOCK_WAIT_S`` again, so a step gives up only after the
file was held for about 4 × 120 + 330 s (default wait) — far beyond any measured hold (docs/concurrency.md)."""


def write_instance_config(home: str | Path) -> bool:
    """Write ``<home>/dagster.yaml`` unless one exists (a deployment's own is kept); True when written."""
    path = Path(home) / "dagster.yaml"
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.exists():
        return False
    path.write_text(yaml.safe_dump(INSTANCE_CONFIG, sort_keys=False))
    return True
