"""The policy interface every teacher and student implements.

A policy starts one session per episode; the runner calls ``act`` once per turn with the rendered prompt
and gets raw text back (parsing is the runner's job, so malformed output is data, not an exception).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from evoharness.envs.base import StepResult
from evoharness.harness.prompts import Mode, RenderedPrompt


class PolicyError(RuntimeError):
    """The policy could not produce a turn (after its own retries); the episode fails with this reason.

    ``kind`` tells failures of the whole teacher (``connection``: unreachable or not answering; ``auth``:
    key rejected; ``not_found``: unknown model or endpoint) from failures of one episode (None), so a run
    can stop when every episode would fail the same way (see :mod:`evoharness.run_guard`).
    """

    def __init__(self, message: str, kind: str | None = None) -> None:
        super().__init__(message)
        self.kind = kind


@dataclass(frozen=True)
class TurnContext:
    """What a policy sees at turn ``t``. ``result.expert_plan`` is set only for privileged policies."""

    t: int
    steps_used: int
    mode: Mode
    prompt: RenderedPrompt
    result: StepResult
    last_observation: str


@dataclass(frozen=True)
class PolicyOutput:
    """A turn's raw text and, where the policy has them, tokens and cost. ``label``: the turn an expert would
    have played in the same state (set only by relabelling policies, see :mod:`evoharness.training.relabel`)."""

    text: str
    input_tokens: int | None = None
    output_tokens: int | None = None
    cost_usd: float | None = None
    label: str | None = None


class PolicySession(Protocol):
    async def act(self, context: TurnContext) -> PolicyOutput:
        ...


class Policy(Protocol):
    """``name`` is the teacher's registry name; ``needs_expert`` asks the runner for privileged plans."""

    name: str
    needs_expert: bool

    def start_episode(self, episode_id: str, objective: str) -> PolicySession:
        ...
