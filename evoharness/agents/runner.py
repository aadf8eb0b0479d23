"""The episode runner: policy × environment × harness → trajectory records, many episodes in flight.

Policy calls run on the event loop; environment steps run in the :class:`EnvPool` worker processes.
A finished episode is handed to ``on_episode`` at once (the warehouse writes it atomically), so a run
killed midway keeps every episode that completed.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime

from evoharness.agents.records import EpisodeRecord, EpisodeSpec, StepRecord
from evoharness.envs.alfworld import SEED_BANK
from evoharness.envs.alfworld.belief import AlfworldBelief
from evoharness.envs.pool import EnvPool, EnvWorkerError
from evoharness.harness.belief import Belief
from evoharness.harness.budget import StepBudget
from evoharness.harness.experience import ExperienceBank, ExperienceBankData, load_bank_file
from evoharness.harness.grammar import ActionKind, ParsedTurn, parse_turn
from evoharness.harness.prompts import Mode, PromptSet
from evoharness.harness.workspace import Workspace
from evoharness.teachers.base import Policy, PolicyError, TurnContext

logger = logging.getLogger(__name__)
INVALID_FEEDBACK = "Invalid action ({reason}). Answer with <think>…</think><action>…</action>."


@dataclass(frozen=True)
class RunSettings:
    """How episodes are played: budget, concurrency, the frozen Experience bank and the domain's Belief."""

    budget: StepBudget = field(default_factory=StepBudget)
    concurrency: int = 8
    bank: ExperienceBankData = field(default_factory=lambda: load_bank_file(SEED_BANK))  # frozen version
    belief_factory: Callable[[], Belief] = AlfworldBelief  # the domain's observation parser
    history_length: int = 10

    @property
    def max_turns(self) -> int:
        """A hard stop even when meta-actions or invalid turns are free."""
        return 3 * self.budget.max_steps


def _cost(kind: ActionKind, budget: StepBudget) -> int:
    if kind is ActionKind.INVALID:
        return budget.invalid_cost
    return budget.meta_action_cost if kind.value in ("track", "commit", "recall", "note") else 1


async def run_episode(
    spec: EpisodeSpec, policy: Policy, pool: EnvPool, prompt_set: PromptSet, settings: RunSettings
) -> EpisodeRecord:
    """Play one episode to done, budget or failure. Never raises for policy or environment faults."""
    record = EpisodeRecord(spec=spec, engine=pool.engine, started_at=datetime.now(UTC))
    workspace = Workspace(
        mode=spec.mode,
        belief=settings.belief_factory(),
        bank=ExperienceBank.fresh(settings.bank),
        budget=settings.budget,
        prompt_set=prompt_set,
        history_length=settings.history_length,
    )
    env = None
    try:
        env, current = await pool.open(spec.game, spec.seed)
        record.objective = current.objective
        workspace.reset(current)
        session = policy.start_episode(spec.episode_id, current.objective)
        observation, steps_used, t = current.observation, 0, 0
        while not current.done and steps_used < settings.budget.max_steps and t < settings.max_turns:
            prompt = workspace.render(current, observation, steps_used)
            started = time.perf_counter()
            output = await session.act(
                TurnContext(t=t, steps_used=steps_used, mode=spec.mode, prompt=prompt, result=current,
                            last_observation=observation)
            )
            latency_ms = (time.perf_counter() - started) * 1000
            turn = parse_turn(output.text)
            if turn.is_meta and spec.mode is not Mode.BPE:
                turn = ParsedTurn(ActionKind.INVALID, turn.think, turn.action, "", "meta-actions are off in react mode")
            admissible: bool | None = None
            if turn.kind is ActionKind.ENV:
                current = await env.step(turn.action)
                admissible = current.valid
                observation = current.observation
                workspace.observe(turn.action, current)
            elif turn.is_meta:
                observation = workspace.apply_meta(turn, t)
            else:
                observation = INVALID_FEEDBACK.format(reason=turn.error)
            workspace.remember(turn.action or "(invalid)")
            steps_used += _cost(turn.kind, settings.budget)
            record.steps.append(
                StepRecord(
                    t=t, kind=turn.kind.value, action=turn.action, argument=turn.argument if turn.is_meta else None,
                    think=turn.think, raw_output=output.text, parse_error=turn.error, observation=observation,
                    admissible=admissible, won=current.won, done=current.done, score=current.score,
                    prompt=prompt.text, prompt_id=prompt.prompt_id, prompt_sha=prompt.prompt_sha,
                    latency_ms=latency_ms, input_tokens=output.input_tokens, output_tokens=output.output_tokens,
                    cost_usd=output.cost_usd, label=output.label,
                    turn_vars=None if output.label is None else json.dumps(prompt.turn_vars),
                )
            )
            t += 1
    except (PolicyError, EnvWorkerError) as exc:
        record.status = "failed"
        first_line = str(exc).splitlines()[0] if str(exc) else repr(exc)
        record.failure_reason = f"{type(exc).__name__}: {first_line}"
    finally:
        if env is not None:
            try:
                await env.release()
            except EnvWorkerError as exc:  # the worker is gone and its cache with it; the record stands
                logger.warning("could not release the environment of episode %s: %s", spec.episode_id, exc)
    record.finished_at = datetime.now(UTC)
    return record


async def run_episodes(
    specs: Sequence[EpisodeSpec],
    policy: Policy,
    pool: EnvPool,
    prompt_set: PromptSet,
    settings: RunSettings,
    on_episode: Callable[[EpisodeRecord], Awaitable[None] | None] | None = None,
    may_start: Callable[[], bool] | None = None,
) -> list[EpisodeRecord]:
    """Run ``specs`` with at most ``settings.concurrency`` in flight; report each as it finishes.

    ``may_start`` is asked before each episode starts; once it says False no further episode starts (those
    in flight finish), and the episodes never started are left out of the result."""
    if settings.concurrency < 1:
        raise ValueError(f"concurrency must be at least 1 (got {settings.concurrency})")
    gate = asyncio.Semaphore(settings.concurrency)

    async def one(spec: EpisodeSpec) -> EpisodeRecord | None:
        async with gate:
            if may_start is not None and not may_start():
                return None
            record = await run_episode(spec, policy, pool, prompt_set, settings)
        if on_episode is not None:
            maybe = on_episode(record)
            if asyncio.iscoroutine(maybe):
                await maybe
        return record

    return [record for record in await asyncio.gather(*(one(spec) for spec in specs)) if record is not None]
