"""Dagster steps fail on a known error with the same one line the command line prints.

:func:`known_failures` (a context manager) and :func:`one_line_failures` (a decorator for asset functions,
under ``@dg.asset``) turn what :func:`evoharness.errors.known_failure_line` knows (unknown ids, migration
drift, a warehouse locked past its wait, a corrupt artefact folder, invalid settings) into ``dagster.Failure``
with that line as its description. Any other exception is a bug and keeps its traceback. Only a warehouse
held by another process past the wait may be retried by a retry policy (a lock clears); the others (a folder
where the file should be, a file that is not DuckDB, drift) need a fix first.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import ParamSpec, TypeVar

import dagster as dg

from evoharness.errors import known_failure_line
from warehouse import WarehouseLockedError

P = ParamSpec("P")
R = TypeVar("R")


@contextmanager
def known_failures() -> Iterator[None]:
    """Raise ``dagster.Failure(description=<one line>)`` for a known failure inside the block."""
    try:
        yield
    except Exception as exc:
        line = known_failure_line(exc)
        if line is None or isinstance(exc, dg.Failure):
            raise
        raise dg.Failure(description=line, allow_retries=isinstance(exc, WarehouseLockedError)) from None


def one_line_failures(function: Callable[P, R]) -> Callable[P, R]:
    """``function`` run under :func:`known_failures`; its signature is kept (Dagster reads its parameters)."""

    @functools.wraps(function)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        with known_failures():
            return function(*args, **kwargs)

    return wrapper
