"""The one path from a planned training to a stored model version: plan with the warehouse, train without it,
store the result. Who trains is a :class:`JobRunner`: this process (:class:`InProcess`), child processes under a
launcher such as ``accelerate launch`` (:class:`Launched`), or Dagster Pipes (``pipelines.resources``); every one
runs the same child entry point, :mod:`evoharness.training.job_runner`. The warehouse is not held while training
runs, so other stages can write meanwhile."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

from evoharness.training.model_versions import ModelVersion, TrainingJob, store_training_result
from evoharness.training.trainer_utils import LogCallback
from evoharness.training.training_lock import ensure_not_training
from warehouse import Warehouse

JOB_RUNNER_MODULE = "evoharness.training.job_runner"


class JobRunner(Protocol):
    """Trains a planned job and returns the ``model_versions`` fields it produced (JSON-ready)."""

    def run(self, job: TrainingJob) -> dict[str, Any]: ...


class InProcess:
    """Train in this process (imports torch here)."""

    def __init__(self, on_log: LogCallback | None = None) -> None:
        self.on_log = on_log

    def run(self, job: TrainingJob) -> dict[str, Any]:
        from evoharness.training.job_runner import run_training_job

        return run_training_job(job, on_log=self.on_log)


def job_files(job: TrainingJob) -> tuple[Path, Path]:
    """(job file, result file) of ``job``, in its output folder; the job file is written, a stale result removed."""
    folder = Path(job.output_dir)
    folder.mkdir(parents=True, exist_ok=True)
    job_file, result_file = folder / "job.json", folder / "result.json"
    job_file.write_text(job.model_dump_json())
    result_file.unlink(missing_ok=True)
    return job_file, result_file


def child_command(launch_command: str, job_file: Path, result_file: Path) -> list[str]:
    """The child entry point under ``launch_command`` (``accelerate launch ...``; empty: this interpreter)."""
    return [*(shlex.split(launch_command) or [sys.executable]), "-m", JOB_RUNNER_MODULE, str(job_file),
            str(result_file)]


def child_env() -> dict[str, str]:
    """This environment with the repository on ``PYTHONPATH`` (the child finds the packages as this process did)."""
    repo = str(Path(__file__).resolve().parents[2])
    return {"PYTHONPATH": os.pathsep.join(p for p in (repo, os.environ.get("PYTHONPATH", "")) if p)}


def read_result(result_file: Path, job: TrainingJob) -> dict[str, Any]:
    """The result the child's main process wrote, or a one-line error when it wrote none."""
    if not result_file.is_file():
        raise RuntimeError(f"the training child of {job.model_version} ended without writing {result_file}")
    return dict(json.loads(result_file.read_text()))


class Launched:
    """Train in child processes started by ``launch_command`` (e.g. ``accelerate launch --config_file
    configs/accelerate/multi_cpu.yaml``; empty: one child with this interpreter)."""

    def __init__(self, launch_command: str) -> None:
        self.launch_command = launch_command

    def run(self, job: TrainingJob) -> dict[str, Any]:
        job_file, result_file = job_files(job)
        subprocess.run(child_command(self.launch_command, job_file, result_file), env=os.environ | child_env(),
                       check=True)
        return read_result(result_file, job)


def realize(wh: Warehouse, plan: Callable[[Warehouse], ModelVersion | TrainingJob],
            runner: JobRunner) -> ModelVersion:
    """The version ``plan`` names: the stored one, or its job trained by ``runner`` and stored now. The warehouse
    is released while the job trains (the next use reconnects)."""
    planned = plan(wh)
    if isinstance(planned, ModelVersion):
        return planned
    ensure_not_training(planned.output_dir, planned.model_version)  # one line here, not a failed child's traceback
    wh.release()
    return store_training_result(wh, planned, runner.run(planned))
