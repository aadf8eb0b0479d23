"""Registry entries pointing at a :class:`LoopbackServer`, for tests, benchmarks and demos."""

from __future__ import annotations

from pathlib import Path

from evoharness.harness.prompts import Mode
from evoharness.teachers.registry import Provider, TeacherRegistry, TeacherSpec
from evoharness.teachers.retry import RetryConfig
from evoharness.testing.loopback import LoopbackServer

TEST_KEY_ENV = "EVOHARNESS_LOOPBACK_KEY"
FAST_RETRY = RetryConfig(max_attempts=4, base_delay_s=0.01, max_delay_s=0.05, jitter=0.5, timeout_s=1.0,
                         max_retry_after_s=1.0)


def loopback_teacher(
    name: str,
    provider: Provider | str,
    server: LoopbackServer,
    *,
    api_key_env: str | None = TEST_KEY_ENV,
    price_in: float | None = 3.0,
    price_out: float | None = 15.0,
    max_concurrency: int = 8,
    retry: RetryConfig = FAST_RETRY,
    mode: Mode = Mode.BPE,
    model: str | None = None,
) -> TeacherSpec:
    """A teacher served by ``server`` (anthropic → its Messages route; openai kinds → Chat Completions)."""
    provider = Provider(provider)
    base_url = server.anthropic_base_url if provider is Provider.ANTHROPIC else server.openai_base_url
    return TeacherSpec(
        name=name, provider=provider, model=model or f"loopback-{provider.value}", base_url=base_url,
        api_key_env=api_key_env, price_in=price_in, price_out=price_out, max_concurrency=max_concurrency,
        mode=mode, retry=retry,
    )


def write_registry(path: str | Path, *specs: TeacherSpec) -> Path:
    """A registry file holding ``expert`` and ``specs``."""
    registry = TeacherRegistry([], Path(path))
    for spec in specs:
        registry.add(spec)
    return registry.save(path)
