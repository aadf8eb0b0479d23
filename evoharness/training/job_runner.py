"""The one child entry point that trains a planned job, for every runner (``--launch``, Dagster Pipes, tests).

    python -m evoharness.training.job_runner JOB.json RESULT.json
    accelerate launch --config_file configs/accelerate/zero3.yaml -m evoharness.training.job_runner JOB.json RESULT.json

Reads a :class:`~evoharness.training.model_versions.TrainingJob` (everything the training needs, no warehouse),
trains it in this process (or in each process of a launch), and from the main process writes the result to
RESULT.json. Started by Dagster Pipes (``DAGSTER_PIPES_CONTEXT`` is set), the main process also streams progress as
Pipes log lines and reports the result as a Pipes message; ``dagster_pipes`` is Dagster's dependency-free protocol
client for external processes, imported only then (the library never imports ``dagster``).
"""

from __future__ import annotations

import json
import os
import sys
from contextlib import ExitStack, nullcontext
from pathlib import Path
from typing import Any

from evoharness.training.grpo import train_grpo
from evoharness.training.grpo_config import GRPOSettings
from evoharness.training.model_versions import TrainingJob
from evoharness.training.sft import train_sft
from evoharness.training.sft_config import SFTSettings
from evoharness.training.trainer_utils import LogCallback
from evoharness.training.training_lock import training_lock

SHOWN = ("loss", "eval_loss", "mean_token_accuracy", "reward", "episode/success", "episode/harness_calls", "kl")
"""The logged values a Pipes progress line shows."""


def run_training_job(job: TrainingJob, on_log: LogCallback | None = None) -> dict[str, Any]:
    """Train ``job`` (in this process, or in each process of an ``accelerate launch``, whose main process holds the
    version's training lock); the ``model_versions`` fields it produced, JSON-ready."""
    with training_lock(job.output_dir, job.model_version) if is_main_process() else nullcontext():
        return _train(job, on_log)


def is_main_process() -> bool:
    """This process is the only one, or rank 0 of an ``accelerate launch``."""
    return int(os.environ.get("RANK", "0")) == 0


def _train(job: TrainingJob, on_log: LogCallback | None) -> dict[str, Any]:
    if job.stage == "sft":
        sft = train_sft(job.source, job.output_dir, SFTSettings.model_validate(job.settings), on_log=on_log)
        return {"path": sft.model_dir, "train_examples": sft.train_examples,
                "validation_examples": sft.validation_examples, "steps": sft.steps, "train_loss": sft.train_loss,
                "eval_loss": sft.eval_loss, "parameters": sft.parameters, "seconds": sft.seconds,
                "loss_history": sft.loss_history, "eval_history": sft.eval_history, "rollout_history": None,
                "decision_history": sft.decision_history, "tokens_seen": sft.tokens_seen}
    grpo = train_grpo(job.source, job.output_dir, GRPOSettings.model_validate(job.settings), bank=job.bank,
                      data_root=job.data_root, engine=job.engine, on_log=on_log)
    losses = [(int(h["step"]), h["loss"]) for h in grpo.history if "loss" in h]
    return {"path": grpo.model_dir, "train_examples": grpo.games, "validation_examples": 0, "steps": grpo.steps,
            "train_loss": losses[-1][1] if losses else None, "eval_loss": None, "parameters": grpo.parameters,
            "seconds": grpo.seconds, "loss_history": losses, "eval_history": [], "rollout_history": grpo.history,
            "decision_history": [], "tokens_seen": None}


def die_with_parent() -> None:
    """On Linux, have the kernel kill this process when the process that started it ends. ``accelerate launch``
    starts its workers in sessions of their own, so killing the launcher's process group (a killed run, a killed
    command) would leave them training, and writing checkpoints, beside the run that resumes it."""
    if not sys.platform.startswith("linux"):
        return
    import ctypes
    import signal

    set_parent_death_signal = 1  # PR_SET_PDEATHSIG
    if ctypes.CDLL(None, use_errno=True).prctl(set_parent_death_signal, signal.SIGKILL, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_PDEATHSIG) failed")


def main(argv: list[str] | None = None) -> None:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 2:
        raise SystemExit("usage: python -m evoharness.training.job_runner JOB.json RESULT.json")
    die_with_parent()
    job = TrainingJob.model_validate_json(Path(args[0]).read_text())
    main_process = is_main_process()  # under accelerate launch, only rank 0 reports
    with ExitStack() as stack:
        pipes = None
        if main_process and os.environ.get("DAGSTER_PIPES_CONTEXT"):
            from dagster_pipes import open_dagster_pipes

            pipes = stack.enter_context(open_dagster_pipes())

        def on_log(logs: dict[str, float], step: int, max_steps: int) -> None:
            shown = {k: round(v, 4) for k, v in logs.items() if k in SHOWN}
            if pipes is not None and shown:
                pipes.log.info(f"{job.model_version} step {step}/{max_steps} {shown}")

        result = run_training_job(job, on_log=on_log if pipes is not None else None)
        if main_process:
            Path(args[1]).write_text(json.dumps(result))
        if pipes is not None:
            pipes.report_custom_message({"model_version": job.model_version, "result": result})


if __name__ == "__main__":
    main()
