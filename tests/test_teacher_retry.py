"""Retries over real HTTP: 429 + retry-after, 5xx, timeouts, truncated bodies, resets, malformed bodies;
permanent failures (context too long, auth) fail at once; empty answers and refusals are re-asked."""

from __future__ import annotations

import asyncio
import random
from email.utils import formatdate

import pytest

from evoharness.envs.base import StepResult
from evoharness.harness.prompts import Mode, RenderedPrompt
from evoharness.teachers.base import PolicyError, PolicyOutput, TurnContext
from evoharness.teachers.clients.errors import retry_after_seconds
from evoharness.teachers.factory import build_policy
from evoharness.teachers.llm import REFUSAL_TEXT, LLMTeacher
from evoharness.teachers.registry import TeacherRegistry
from evoharness.teachers.retry import Cooldown, RetryConfig, backoff_delay
from evoharness.testing.loopback import LoopbackServer, Reply
from evoharness.testing.responders import FaultInjector, Scripted
from evoharness.testing.teachers import FAST_RETRY, TEST_KEY_ENV, loopback_teacher

OK = Reply(text="<think>ok</think><action>look</action>", input_tokens=10, output_tokens=5)
PROVIDERS = ["openai", "anthropic"]


@pytest.fixture(autouse=True)
def api_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(TEST_KEY_ENV, "sk-retry-test-abcdef123456")


def context() -> TurnContext:
    prompt = RenderedPrompt(system="system text", user="Task: x", prompt_id="alfworld/bpe", prompt_sha="0" * 64)
    result = StepResult(observation="", admissible_commands=("look",), objective="x", won=False, done=False, score=0.0)
    return TurnContext(t=0, steps_used=0, mode=Mode.BPE, prompt=prompt, result=result, last_observation="")


def act(server: LoopbackServer, provider: str, retry: RetryConfig = FAST_RETRY) -> PolicyOutput:
    spec = loopback_teacher("retry", provider, server, retry=retry, price_in=1.0, price_out=2.0)
    policy = build_policy("retry", Mode.BPE, TeacherRegistry([spec]))
    assert isinstance(policy, LLMTeacher)

    async def run() -> PolicyOutput:
        try:
            return await policy.start_episode("e" * 32, "x").act(context())
        finally:
            await policy.aclose()

    return asyncio.run(run())


@pytest.mark.parametrize("provider", PROVIDERS)
def test_429_honours_retry_after(provider: str) -> None:
    limited = Reply(status=429, text="rate limited", headers={"retry-after": "0.4"})
    with LoopbackServer(Scripted([limited, OK])) as server:
        output = act(server, provider, FAST_RETRY.model_copy(update={"base_delay_s": 0.0}))
        first, second = server.calls
    assert output.text == OK.text
    assert second.received_at - first.received_at >= 0.4


@pytest.mark.parametrize("provider", PROVIDERS)
@pytest.mark.parametrize("fault", ["500", "529", "timeout", "truncate", "reset", "malformed_body"])
def test_transient_fault_is_retried(provider: str, fault: str) -> None:
    injector = FaultInjector(lambda call: OK, timeout_s=FAST_RETRY.timeout_s + 0.5)
    with LoopbackServer(Scripted([injector.fault_reply(fault, None), OK])) as server:  # type: ignore[arg-type]
        output = act(server, provider)
        assert len(server.calls) == 2
    assert output.text == OK.text
    assert (output.input_tokens, output.output_tokens) == (10, 5)
    assert output.cost_usd == pytest.approx((10 * 1.0 + 5 * 2.0) / 1e6)


@pytest.mark.parametrize("provider", PROVIDERS)
def test_retries_are_bounded(provider: str) -> None:
    with LoopbackServer(Scripted([Reply(status=500, text="down")])) as server:
        with pytest.raises(PolicyError, match=r"HTTP 500.*gave up after 4 attempts"):
            act(server, provider)
        assert len(server.calls) == FAST_RETRY.max_attempts


@pytest.mark.parametrize("provider", PROVIDERS)
def test_context_too_long_fails_without_retry(provider: str) -> None:
    too_long = Reply(status=400, text="prompt is too long: 250000 tokens > 200000 maximum",
                     error_code="context_length_exceeded")
    with LoopbackServer(Scripted([too_long, OK])) as server:
        with pytest.raises(PolicyError, match="context too long"):
            act(server, provider)
        assert len(server.calls) == 1


@pytest.mark.parametrize("provider", PROVIDERS)
def test_auth_error_fails_without_retry(provider: str) -> None:
    with LoopbackServer(Scripted([Reply(status=401, text="invalid x-api-key"), OK])) as server:
        with pytest.raises(PolicyError, match="HTTP 401"):
            act(server, provider)
        assert len(server.calls) == 1


@pytest.mark.parametrize("provider", PROVIDERS)
def test_empty_answer_is_asked_again_and_tokens_add_up(provider: str) -> None:
    empty = Reply(text="", input_tokens=10, output_tokens=0)
    with LoopbackServer(Scripted([empty, OK])) as server:
        output = act(server, provider)
        assert len(server.calls) == 2
    assert output.text == OK.text
    assert (output.input_tokens, output.output_tokens) == (20, 5)


@pytest.mark.parametrize("provider", PROVIDERS)
def test_repeated_refusal_becomes_an_invalid_turn(provider: str) -> None:
    refusal = Reply(text="", stop_reason="refusal", input_tokens=7, output_tokens=1)
    with LoopbackServer(Scripted([refusal])) as server:
        output = act(server, provider)
        assert len(server.calls) == 1 + FAST_RETRY.refusal_retries
    assert output.text == REFUSAL_TEXT
    assert output.input_tokens == 7 * len(server.calls)


def test_backoff_is_exponential_capped_and_jittered() -> None:
    config = RetryConfig(base_delay_s=1.0, max_delay_s=5.0, jitter=0.5)
    rng = random.Random(0)
    delays = [[backoff_delay(config, attempt, rng) for attempt in range(1, 6)] for _ in range(50)]
    for attempt, raw in enumerate([1, 2, 4, 5, 5]):
        values = [row[attempt] for row in delays]
        assert all(raw * 0.5 <= v <= raw for v in values)
        assert len(set(values)) > 1  # jitter spreads retries


def test_retry_after_forms() -> None:
    assert retry_after_seconds({"Retry-After": "3"}) == 3.0
    assert retry_after_seconds({"retry-after-ms": "250", "retry-after": "9"}) == 0.25
    assert retry_after_seconds({"retry-after": formatdate(1_000_010, usegmt=True)}, now=1_000_000) == pytest.approx(10)
    assert retry_after_seconds({}) is None


def test_cooldown_holds_every_caller() -> None:
    now = [100.0]
    slept: list[float] = []

    async def sleep(seconds: float) -> None:
        slept.append(seconds)
        now[0] += seconds

    cooldown = Cooldown(clock=lambda: now[0])
    cooldown.hold(2.0)
    cooldown.hold(1.0)  # a shorter hold never shortens the pause
    asyncio.run(cooldown.wait(sleep))
    assert slept == [2.0] and now[0] == 102.0
