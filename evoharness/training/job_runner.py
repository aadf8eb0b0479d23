"""Run a planned training job in this process, or in each process of ``accelerate launch``, without Dagster.

    python -m evoharness.training.job_runner JOB.json RESULT.json
    accelerate launch --config_file configs/accelerate/zero3.yaml -m evoharness.training.job_runner JOB.json RESULT.json

The CLI's ``--launch`` writes the job (everything the training needs, no warehouse) and stores the result
that the main process writes; several processes never open the DuckDB warehouse.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

from evoharness.training.model_versions import TrainingJob, run_training_job


def launch_job(job: TrainingJob, launch_command: str) -> dict[str, Any]:
    """Train ``job`` in child processes started by ``launch_command`` (e.g. ``accelerate launch --config_file
    configs/accelerate/zero3.yaml``; empty: this interpreter); the result the main process wrote."""
    folder = Path(job.output_dir)
    folder.mkdir(parents=True, exist_ok=True)
    job_file, result_file = folder / "job.json", folder / "result.json"
    job_file.write_text(job.model_dump_json())
    result_file.unlink(missing_ok=True)
    repo = str(Path(__file__).resolve().parents[2])
    env = os.environ | {"PYTHONPATH": os.pathsep.join(p for p in (repo, os.environ.get("PYTHONPATH", "")) if p)}
    command = [*(shlex.split(launch_command) or [sys.executable]), "-m", "evoharness.training.job_runner",
               str(job_file), str(result_file)]
    subprocess.run(command, env=env, check=True)
    return dict(json.loads(result_file.read_text()))


def main(argv: list[str] | None = None) -> None:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 2:
        raise SystemExit("usage: python -m evoharness.training.job_runner JOB.json RESULT.json")
    job = TrainingJob.model_validate_json(Path(args[0]).read_text())
    result = run_training_job(job)
    if int(os.environ.get("RANK", "0")) == 0:
        Path(args[1]).write_text(json.dumps(result))


if __name__ == "__main__":
    main()
