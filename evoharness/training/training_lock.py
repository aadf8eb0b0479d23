"""One training of a model version at a time.

The process that writes a version's checkpoints (the only process, or the main process of a launch) holds an
exclusive lock on ``training.lock`` in the version's output folder while it trains. A second training of the same
version (a retried step, a resumed run, a user's rerun while the first still runs) fails at once with one line naming
the holder, instead of writing the same checkpoints beside it. The kernel drops the lock when its process ends, so a
killed training never leaves a stale one.
"""

from __future__ import annotations

import fcntl
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from evoharness.errors import TrainingInProgressError

LOCK_FILE = "training.lock"


@contextmanager
def training_lock(output_dir: str | Path, model_version: str) -> Iterator[None]:
    """Hold the training lock of ``model_version`` (folder ``output_dir``) for the block; raise
    :class:`TrainingInProgressError` at once when another process holds it."""
    path = Path(output_dir) / LOCK_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a+") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.seek(0)
            holder = handle.read().strip()
            raise TrainingInProgressError(model_version, holder or f"another process (lock {path})") from None
        handle.seek(0)
        handle.truncate()
        handle.write(f"PID {os.getpid()} on {os.uname().nodename}\n")
        handle.flush()
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def ensure_not_training(output_dir: str | Path, model_version: str) -> None:
    """Raise :class:`TrainingInProgressError` when another process trains ``model_version`` now."""
    with training_lock(output_dir, model_version):
        pass
