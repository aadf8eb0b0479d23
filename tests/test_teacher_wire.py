"""Both official SDKs talk to the loopback server over real HTTP: request and response wire formats."""

from __future__ import annotations

import asyncio

import pytest

from evoharness.teachers.clients import make_client
from evoharness.teachers.clients.base import Completion
from evoharness.teachers.registry import Provider
from evoharness.testing.loopback import LoopbackServer, Reply
from evoharness.testing.responders import Scripted
from evoharness.testing.teachers import TEST_KEY_ENV, loopback_teacher

KEY = "sk-wire-test-0123456789abcdef"
MESSAGES = [
    {"role": "system", "content": "You are an agent in a household text game."},
    {"role": "user", "content": "Task: put a mug in coffeemachine.\nAdmissible commands:\nlook, inventory"},
]


@pytest.fixture(autouse=True)
def api_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(TEST_KEY_ENV, KEY)


def complete(provider: str, reply: Reply, temperature: float | None = 0.3) -> tuple[Completion, dict, dict]:
    with LoopbackServer(Scripted([reply])) as server:
        spec = loopback_teacher("wire", provider, server, model=f"model-{provider}")
        client = make_client(spec)

        async def run() -> Completion:
            try:
                return await client.complete(MESSAGES, max_tokens=77, temperature=temperature)
            finally:
                await client.aclose()  # type: ignore[attr-defined]

        completion = asyncio.run(run())
        (call,) = server.calls
    return completion, call.body, call.headers


@pytest.mark.parametrize("provider", ["openai", "openai_compatible"])
def test_openai_chat_completions_wire_format(provider: str) -> None:
    reply = Reply(text="<think>t</think><action>look</action>", input_tokens=123, output_tokens=9)
    completion, body, headers = complete(provider, reply)
    assert body["model"] == f"model-{provider}"
    assert body["messages"] == MESSAGES
    token_param = "max_completion_tokens" if provider == "openai" else "max_tokens"
    assert body[token_param] == 77
    assert body["temperature"] == 0.3
    assert headers["authorization"] == f"Bearer {KEY}"
    assert completion.text == reply.text
    assert (completion.input_tokens, completion.output_tokens) == (123, 9)
    assert completion.stop_reason == "stop" and not completion.refused
    assert completion.model == f"model-{provider}"


def test_anthropic_messages_wire_format() -> None:
    reply = Reply(text="<think>t</think><action>inventory</action>", input_tokens=321, output_tokens=12)
    completion, body, headers = complete("anthropic", reply)
    assert body["model"] == "model-anthropic"
    assert body["system"] == MESSAGES[0]["content"]
    assert body["messages"] == [MESSAGES[1]]
    assert body["max_tokens"] == 77
    assert body["temperature"] == 0.3
    assert KEY in (headers.get("x-api-key", "") + headers.get("authorization", ""))
    assert headers.get("anthropic-version")
    assert completion.text == reply.text
    assert (completion.input_tokens, completion.output_tokens) == (321, 12)
    assert completion.stop_reason == "end_turn"


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
def test_temperature_none_is_not_sent(provider: str) -> None:
    _, body, _ = complete(provider, Reply(text="x"), temperature=None)
    assert "temperature" not in body


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
def test_refusal_is_reported(provider: str) -> None:
    completion, _, _ = complete(provider, Reply(text="I can't help with that.", stop_reason="refusal"))
    assert completion.refused
    assert completion.text == "I can't help with that."


@pytest.mark.parametrize("provider", ["openai", "openai_compatible"])
def test_a_thought_the_server_split_off_goes_back_in_front(provider: str) -> None:
    """``transformers serve`` and vLLM's reasoning parsers return ``<think>``'s text as ``reasoning_content``."""
    completion, _, _ = complete(provider, Reply(text="<action>look</action>", reasoning="\nfind the mug\n"))
    assert completion.text == "<think>find the mug</think><action>look</action>"
    whole, _, _ = complete(provider, Reply(text="<think>kept</think><action>look</action>", reasoning="dup"))
    assert whole.text == "<think>kept</think><action>look</action>"  # a server that did not split keeps its text


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
def test_max_tokens_stop_is_reported(provider: str) -> None:
    completion, _, _ = complete(provider, Reply(text="<think>cut", stop_reason="max_tokens"))
    assert completion.stop_reason in ("length", "max_tokens")
    assert not completion.refused


def test_make_client_reads_the_key_from_the_named_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    from evoharness.teachers.registry import MissingCredentialsError, TeacherSpec

    spec = TeacherSpec(name="k", provider=Provider.OPENAI, model="m", api_key_env="EVOHARNESS_UNSET_KEY_VAR")
    monkeypatch.delenv("EVOHARNESS_UNSET_KEY_VAR", raising=False)
    with pytest.raises(MissingCredentialsError, match=r"\$EVOHARNESS_UNSET_KEY_VAR"):
        make_client(spec)
