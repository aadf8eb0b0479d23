"""One training of a model version at a time: a second one fails at once in one line naming the holder, and a
killed holder leaves no stale lock (evoharness.training.training_lock)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from evoharness.errors import TrainingInProgressError, known_failure_line
from evoharness.training.model_versions import TrainingJob
from evoharness.training.realize import realize
from evoharness.training.training_lock import ensure_not_training, training_lock
from tests.conftest import subprocess_env
from warehouse import Warehouse

HOLDER = """
import sys
from evoharness.training.training_lock import training_lock
with training_lock(sys.argv[1], "expert-sft-1"):
    print("held", flush=True)
    sys.stdin.read()
"""
"""Trains (holds the lock of) a version until its stdin closes or it is killed."""


def test_a_second_training_fails_in_one_line_and_a_killed_holder_frees_the_version(tmp_path: Path) -> None:
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(tmp_path)], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True, env=subprocess_env())
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        with pytest.raises(TrainingInProgressError) as busy:
            ensure_not_training(tmp_path, "expert-sft-1")
        line = known_failure_line(busy.value)
        assert line is not None and "\n" not in line
        assert f"PID {holder.pid}" in line and "'expert-sft-1'" in line and "resumes" in line, line
    finally:
        holder.kill()
        holder.wait(timeout=30)
    ensure_not_training(tmp_path, "expert-sft-1")  # the kernel dropped the killed holder's lock
    with training_lock(tmp_path, "expert-sft-1"), pytest.raises(TrainingInProgressError):
        ensure_not_training(tmp_path, "expert-sft-1")  # held in this process too, as an in-process training does


def test_realize_refuses_a_version_that_is_being_trained_before_it_starts_a_second(tmp_path: Path) -> None:
    job = TrainingJob(stage="sft", model_version="expert-sft-1", teacher="expert", dataset_id="d", source="s",
                      base_model="tiny", output_dir=str(tmp_path / "models" / "expert-sft-1"), settings={}, run_id="r")
    started = []

    class Recording:
        def run(self, planned: TrainingJob) -> dict[str, object]:
            started.append(planned.model_version)
            return {}

    with (Warehouse(tmp_path / "w.duckdb") as wh, training_lock(job.output_dir, job.model_version),
          pytest.raises(TrainingInProgressError)):
        realize(wh, lambda w: job, Recording())
    assert started == []
