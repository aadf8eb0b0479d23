"""Trajectory records as warehouse rows: the library's side of the mapping (the warehouse takes plain rows)."""

from __future__ import annotations

from dataclasses import asdict
from typing import Any, Literal

from evoharness.agents.records import EpisodeRecord

PolicyKind = Literal["teacher", "student", "relabel"]
"""``teacher``: a registry entry; ``student``: a model version playing (evaluation); ``relabel``: a model version
playing on train games while the expert labels every state it reaches (DAgger)."""


def episode_row(record: EpisodeRecord, run_id: str, code_version: str, policy_kind: PolicyKind = "teacher",
                model_version: str | None = None) -> dict[str, Any]:
    """The ``episodes`` row of ``record``. Students (``student``, ``relabel``) name their model version."""
    if (policy_kind != "teacher") != (model_version is not None):
        raise ValueError("a student episode names its model version, and only a student episode does")
    spec = record.spec
    return {
        "episode_id": spec.episode_id,
        "teacher": spec.teacher,
        "mode": spec.mode.value,
        "game_id": spec.game.game_id,
        "split": spec.game.split,
        "task_type": spec.game.task_type,
        "seed": spec.seed,
        "max_steps": spec.max_steps,
        "status": record.status,
        "failure_reason": record.failure_reason,
        "won": record.won,
        "n_steps": len(record.steps),
        "n_env_steps": sum(step.kind == "env" for step in record.steps),
        "n_harness_calls": record.n_harness_calls,
        "n_invalid": sum(step.kind == "invalid" for step in record.steps),
        "final_score": record.steps[-1].score if record.steps else None,
        "input_tokens": record.input_tokens,
        "output_tokens": record.output_tokens,
        "cost_usd": record.cost_usd,
        "started_at": record.started_at,
        "finished_at": record.finished_at,
        "prompt_id": spec.prompt_id,
        "prompt_sha": spec.prompt_sha,
        "bank": spec.bank or None,
        "engine": record.engine,
        "code_version": code_version,
        "run_id": run_id,
        "policy_kind": policy_kind,
        "model_version": model_version,
    }


def step_rows(record: EpisodeRecord) -> list[dict[str, Any]]:
    """The ``steps`` rows of ``record`` (without the episode id, which the warehouse adds)."""
    return [asdict(step) for step in record.steps]
