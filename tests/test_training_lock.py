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


ORPHAN = """
import os, subprocess, sys, time
child = subprocess.Popen([sys.executable, "-c",
                          "from evoharness.training.job_runner import die_with_parent; import time; "
                          "die_with_parent(); print('ready', flush=True); time.sleep(120)"],
                         start_new_session=True, stdout=subprocess.PIPE, text=True)
assert child.stdout.readline().strip() == "ready"
print(child.pid, flush=True)
time.sleep(120)
"""
"""A launcher that starts a training worker in a session of its own, as ``accelerate launch`` does."""


def test_a_training_worker_dies_with_its_killed_launcher() -> None:
    """Killing a launcher's process group misses workers in sessions of their own; the kernel kills them instead,
    so no orphan trains beside the resumed run (and holds its lock)."""
    import os
    import signal
    import time

    def alive(pid: int) -> bool:  # a killed worker nobody has reaped yet is a zombie: dead
        try:
            return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
        except FileNotFoundError:
            return False

    launcher = subprocess.Popen([sys.executable, "-c", ORPHAN], stdout=subprocess.PIPE, text=True,
                                env=subprocess_env(), start_new_session=True)
    assert launcher.stdout is not None
    worker = int(launcher.stdout.readline())
    assert alive(worker)
    os.killpg(launcher.pid, signal.SIGKILL)
    launcher.wait(timeout=30)
    deadline = time.monotonic() + 30
    while alive(worker):
        assert time.monotonic() < deadline, f"worker {worker} outlived its killed launcher"
        time.sleep(0.2)
