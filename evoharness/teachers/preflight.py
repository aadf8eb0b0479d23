"""Preflight: one real call through a teacher's real client before a run fans out.

It proves the teacher is reachable, accepts the key, serves the model and answers in the turn format
(``<think>…</think><action>…</action>``), rendering an example first turn (``teacher_prompts/preflight/``)
through the teacher's own prompt set. A failure says what is wrong and how to fix it, so a run never
stores hundreds of failed episodes against a teacher that cannot answer.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from functools import cache

import yaml

from evoharness.harness.grammar import ActionKind, parse_turn
from evoharness.harness.prompts import Mode, RenderedPrompt, load_prompt_set, prompts_dir
from evoharness.teachers.clients.base import (
    AuthenticationFailure,
    ClientError,
    ConnectionFailure,
    ModelNotFound,
    aclose_client,
)
from evoharness.teachers.clients.constrained import ActionSpace
from evoharness.teachers.clients.redact import short
from evoharness.teachers.registry import Provider, TeacherRegistry, TeacherSpec
from evoharness.teachers.retry import RetriesExhausted, with_retries

REMOTE_PROVIDERS = frozenset({Provider.ANTHROPIC, Provider.OPENAI, Provider.OPENAI_COMPATIBLE})
PREFLIGHT_ATTEMPTS = 3
"""Transport attempts of the preflight call (the teacher's own retry count if lower): a dead host fails fast."""
FORMAT_ASKS = 3
"""Answers asked for at most until one is in the turn format (a rare stray answer does not fail a run)."""


class PreflightError(RuntimeError):
    """The teacher failed its preflight; the message names the problem and the fix."""


@dataclass(frozen=True)
class PreflightResult:
    teacher: str
    ok: bool
    message: str
    calls: int = 0
    cost_usd: float | None = None
    seconds: float = 0.0


def needs_preflight(spec: TeacherSpec) -> bool:
    """API teachers (reached over HTTP) need one; the expert and in-process local models do not."""
    return spec.provider in REMOTE_PROVIDERS


@cache
def _example_state() -> dict:
    return yaml.safe_load((prompts_dir() / "preflight" / "alfworld.yaml").read_text())


def preflight_prompt(spec: TeacherSpec, mode: Mode, max_steps: int = 70) -> RenderedPrompt:
    """The example first turn rendered by a real workspace through the teacher's prompt set for ``mode``."""
    from evoharness.envs.alfworld import SEED_BANK
    from evoharness.envs.alfworld.belief import AlfworldBelief
    from evoharness.envs.base import StepResult
    from evoharness.harness.budget import StepBudget
    from evoharness.harness.experience import ExperienceBank, load_bank_file
    from evoharness.harness.workspace import Workspace

    state = _example_state()
    first = StepResult(observation=state["observation"], admissible_commands=tuple(state["admissible_commands"]),
                       objective=state["objective"], won=False, done=False, score=0.0)
    workspace = Workspace(mode=mode, belief=AlfworldBelief(), bank=ExperienceBank.fresh(load_bank_file(SEED_BANK)),
                          budget=StepBudget(max_steps=max_steps), prompt_set=load_prompt_set(spec.prompt_id(mode)))
    workspace.reset(first)
    return workspace.render(first, first.observation, 0)


def _endpoint(spec: TeacherSpec) -> str:
    return spec.base_url or f"the {spec.provider.value} default endpoint"


def explain(spec: TeacherSpec, exc: BaseException) -> str:
    """A preflight failure as one message: what failed, the server's reason, and the fix."""
    cause = exc.__cause__ if isinstance(exc, RetriesExhausted) else exc
    reason = exc.reason if isinstance(exc, (ClientError, RetriesExhausted)) else str(exc)
    head = f"preflight of teacher {spec.name!r} failed"
    if isinstance(cause, ConnectionFailure):
        return (f"{head}: cannot reach {_endpoint(spec)} ({reason}). Fix: check the teacher's base_url "
                f"(`evoharness teacher add {spec.name} --base-url ...`) and that the server is up.")
    if isinstance(cause, AuthenticationFailure):
        where = f"${spec.api_key_env}" if spec.api_key_env else "no key (the teacher has no api_key_env)"
        return (f"{head}: the server rejected the key from {where} ({reason}). Fix: put a valid key in "
                f"{where} or register the right variable with --api-key-env.")
    if isinstance(cause, ModelNotFound):
        return (f"{head}: model {spec.model!r} is not served at {_endpoint(spec)} ({reason}). Fix: check "
                f"--model and --base-url of teacher {spec.name!r}.")
    return f"{head}: {reason}. Fix: check the teacher's registry entry (`evoharness teacher list`)."


async def check(teacher: object, spec: TeacherSpec, mode: Mode) -> PreflightResult:
    """One real call through ``teacher.client`` (an :class:`LLMTeacher`); never raises for teacher faults."""
    client = teacher.client  # type: ignore[attr-defined]
    retry = spec.retry.model_copy(update={"max_attempts": min(spec.retry.max_attempts, PREFLIGHT_ATTEMPTS)})
    messages = preflight_prompt(spec, mode).messages()
    # a constrained teacher's server must take the constraint, as every turn will send it
    space = ActionSpace(tuple(_example_state()["admissible_commands"]), meta=mode is Mode.BPE) \
        if spec.constrain_actions else None
    options = {"action_space": space} if space is not None else {}
    started, calls, cost, text = time.perf_counter(), 0, None, ""
    for _ in range(FORMAT_ASKS):
        calls += 1
        try:
            completion = await with_retries(
                lambda: client.complete(messages, max_tokens=spec.max_tokens, temperature=spec.temperature,
                                        **options),
                retry, label=f"{spec.name} preflight")
        except (ClientError, RetriesExhausted) as exc:
            return PreflightResult(spec.name, False, explain(spec, exc), calls, cost, time.perf_counter() - started)
        call_cost = spec.cost_usd(completion.input_tokens, completion.output_tokens)
        if call_cost is not None:
            cost = (cost or 0.0) + call_cost
        text = completion.text
        turn = parse_turn(text)
        if space is not None and turn.kind is ActionKind.ENV and turn.action not in space.commands:
            return PreflightResult(
                spec.name, False,
                f"preflight of teacher {spec.name!r} failed: {_endpoint(spec)} answered {turn.action!r}, which is not "
                f"an admissible command, though the request carried the turn grammar: the server does not enforce "
                f"structured outputs of kind {spec.structured_outputs}. Fix: serve it with structured outputs (vLLM, "
                f"SGLang) or register it without --structured-outputs.", calls, cost, time.perf_counter() - started)
        if turn.kind is not ActionKind.INVALID:
            seconds = time.perf_counter() - started
            return PreflightResult(spec.name, True, f"preflight of teacher {spec.name!r} passed: {_endpoint(spec)} "
                                   f"answered model {spec.model!r} in the turn format ({seconds:.1f}s)",
                                   calls, cost, seconds)
    return PreflightResult(
        spec.name, False,
        f"preflight of teacher {spec.name!r} failed: model {spec.model!r} answered {FORMAT_ASKS} times but never in "
        f"the turn format <think>…</think><action>…</action> (last answer: {short(text, 120)!r}). Fix: check "
        f"--model, --max-tokens and --prompt-template of teacher {spec.name!r}.",
        calls, cost, time.perf_counter() - started)


def run_preflight(name: str, mode: Mode | None = None, registry: TeacherRegistry | None = None) -> PreflightResult:
    """Build the teacher's policy, make the preflight call on a fresh event loop, close the client."""
    from evoharness.teachers.factory import build_policy

    registry = registry or TeacherRegistry.load()
    spec = registry.get(name)
    if not needs_preflight(spec):
        return PreflightResult(name, True, f"teacher {name!r} ({spec.provider.value}) needs no preflight")
    try:
        policy = build_policy(name, mode or spec.mode, registry)
    except ValueError as exc:  # a missing key variable, an incomplete entry
        return PreflightResult(name, False, f"preflight of teacher {name!r} failed: {exc}")

    async def go() -> PreflightResult:
        try:
            return await check(policy, spec, mode or spec.mode)
        finally:
            await aclose_client(policy)

    return asyncio.run(go())
