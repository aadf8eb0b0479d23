"""The training child process that the training assets launch through Dagster Pipes.

    python -m pipelines.train_child JOB.json                               # one process
    accelerate launch --config_file configs/accelerate/zero3.yaml -m pipelines.train_child JOB.json

Reads a :class:`~evoharness.training.model_versions.TrainingJob` (written by the asset), trains it with the
library, and — from the main process only — streams progress as Pipes log lines and reports the result as a
Pipes custom message; the asset stores the model version and attaches the metadata. This module imports
``dagster_pipes`` (not ``dagster``), so it lives beside the pipelines, not in the library; torch and TRL are
imported here, never in the Dagster process.
"""

from __future__ import annotations

import os
import sys
from contextlib import ExitStack
from pathlib import Path

from evoharness.training.model_versions import TrainingJob, run_training_job

SHOWN = ("loss", "eval_loss", "mean_token_accuracy", "reward", "episode/success", "episode/harness_calls", "kl")


def main(argv: list[str] | None = None) -> None:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        raise SystemExit("usage: python -m pipelines.train_child JOB.json")
    job = TrainingJob.model_validate_json(Path(args[0]).read_text())
    main_process = int(os.environ.get("RANK", "0")) == 0  # under accelerate launch, only rank 0 talks to Dagster
    with ExitStack() as stack:
        pipes = None
        if main_process:
            from dagster_pipes import open_dagster_pipes

            pipes = stack.enter_context(open_dagster_pipes())

        def on_log(logs: dict[str, float], step: int, max_steps: int) -> None:
            shown = {k: round(v, 4) for k, v in logs.items() if k in SHOWN}
            if pipes is not None and shown:
                pipes.log.info(f"{job.model_version} step {step}/{max_steps} {shown}")

        result = run_training_job(job, on_log=on_log)
        if pipes is not None:
            pipes.report_custom_message({"model_version": job.model_version, "result": result})


if __name__ == "__main__":
    main()
