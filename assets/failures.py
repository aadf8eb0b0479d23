"""Dagster steps fail on a known error with the same one line the command line prints.

:func:`known_failures` (a context manager) and :func:`one_line_failures` (a decorator for asset functions,
under ``@dg.asset``) turn what :func:`evoharness.errors.known_failure_line` knows (unknown ids, migration
drift, a warehouse locked past its wait, a corrupt artefact folder, invalid settings) into ``dagster.Failure``
with that line as its description. Any other exception is a bug and keeps its traceback.

Only a warehouse held by another process past the wait is retried (a lock clears), on
:data:`pipelines.instance.WAREHOUSE_RETRY`'s schedule, by a ``RetryRequested`` raised here; the others (a folder
where the file should be, a file that is not DuckDB, drift) need a fix first. No step carries a retry policy: Dagster
applies one to every exception and to an interrupt too, so a run stopped by SIGTERM would start its step again in the
same process 30 s later instead of stopping (and be resumed a second time by ``orphaned_run_sensor``).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import ParamSpec, TypeVar

import dagster as dg

from evoharness.errors import known_failure_line
from pipelines.instance import WAREHOUSE_RETRY
from warehouse import WarehouseLockedError

P = ParamSpec("P")
R = TypeVar("R")


@contextmanager
def known_failures() -> Iterator[None]:
    """Raise ``dagster.Failure(description=<one line>)`` for a known failure inside the block; for a warehouse
    locked past the wait, a ``RetryRequested`` caused by that failure."""
    try:
        yield
    except Exception as exc:
        line = known_failure_line(exc)
        if line is None or isinstance(exc, dg.Failure):
            raise
        if isinstance(exc, WarehouseLockedError):
            raise locked_warehouse_retry() from dg.Failure(description=line)
        raise dg.Failure(description=line, allow_retries=False) from None


def locked_warehouse_retry() -> dg.RetryRequested:
    """The retry of the current step on :data:`WAREHOUSE_RETRY`'s schedule (its first attempt outside a step)."""
    try:
        attempt = dg.OpExecutionContext.get().retry_number + 1
    except dg.DagsterInvariantViolationError:
        attempt = 1
    assert WAREHOUSE_RETRY.max_retries is not None
    return dg.RetryRequested(max_retries=WAREHOUSE_RETRY.max_retries,
                             seconds_to_wait=WAREHOUSE_RETRY.calculate_delay(attempt))


def one_line_failures(function: Callable[P, R]) -> Callable[P, R]:
    """``function`` run under :func:`known_failures`; its signature is kept (Dagster reads its parameters)."""

    @functools.wraps(function)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        with known_failures():
            return function(*args, **kwargs)

    return wrapper
