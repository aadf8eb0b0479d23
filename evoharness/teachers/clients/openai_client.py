"""OpenAI Chat Completions through ``openai.AsyncOpenAI``; also any OpenAI-compatible server (``base_url``)."""

from __future__ import annotations

import time
from typing import Any

import openai

from evoharness.teachers.clients.base import Completion, TransientError
from evoharness.teachers.clients.constrained import ActionSpace
from evoharness.teachers.clients.redact import Redactor
from evoharness.teachers.clients.sdk import PerLoop, sdk_errors, translate
from evoharness.teachers.clients.structured import StructuredOutputs, structured_outputs_body

PLACEHOLDER_KEY = "not-needed"  # OpenAI-compatible servers without auth still need a non-empty key in the SDK


class OpenAIChatClient:
    """``token_param`` is ``max_completion_tokens`` (api.openai.com) or ``max_tokens`` (most compatible servers).
    With ``structured_outputs``, a turn given an action space is held to it by the server (:mod:`.structured`)."""

    def __init__(
        self,
        model: str,
        api_key: str | None,
        base_url: str | None = None,
        timeout_s: float = 60.0,
        token_param: str = "max_completion_tokens",
        provider: str = "openai",
        structured_outputs: StructuredOutputs | None = None,
    ) -> None:
        self.model, self.token_param, self.provider = model, token_param, provider
        self.structured_outputs = structured_outputs
        self._redact = Redactor([api_key])
        self._sdk = PerLoop(
            lambda: openai.AsyncOpenAI(
                api_key=api_key or PLACEHOLDER_KEY, base_url=base_url, timeout=timeout_s, max_retries=0
            )
        )

    async def aclose(self) -> None:
        await self._sdk.aclose()

    async def complete(
        self, messages: list[dict[str, str]], *, max_tokens: int, temperature: float | None,
        action_space: ActionSpace | None = None,
    ) -> Completion:
        kwargs: dict[str, Any] = {"model": self.model, "messages": messages, self.token_param: max_tokens}
        if temperature is not None:
            kwargs["temperature"] = temperature
        if action_space is not None:
            if self.structured_outputs is None:
                raise ValueError(f"{self.provider} client: an action space needs structured_outputs (the server's "
                                 "structured-output option)")
            kwargs["extra_body"] = structured_outputs_body(self.structured_outputs, action_space)
        started = time.perf_counter()
        try:
            response = await self._sdk.get().chat.completions.create(**kwargs)
        except sdk_errors(openai) as exc:
            raise translate(exc, openai, self._redact, self.provider) from None  # the SDK error holds headers
        latency_ms = (time.perf_counter() - started) * 1000
        choices = getattr(response, "choices", None)
        if not choices or getattr(choices[0], "message", None) is None:
            raise TransientError(f"{self.provider} malformed response (no choices)")
        choice = choices[0]
        message = choice.message
        refusal = getattr(message, "refusal", None)
        usage = getattr(response, "usage", None)
        stop = "refusal" if refusal is not None else choice.finish_reason
        return Completion(
            text=refusal or with_reasoning(message),
            input_tokens=getattr(usage, "prompt_tokens", None),
            output_tokens=getattr(usage, "completion_tokens", None),
            latency_ms=latency_ms,
            model=getattr(response, "model", None) or self.model,
            stop_reason=stop,
        )


REASONING_FIELDS = ("reasoning_content", "reasoning")
"""Where reasoning-aware servers (``transformers serve``, vLLM with a reasoning parser) put a split-off thought."""


def with_reasoning(message: Any) -> str:
    """The answer as the model wrote it: a thought the server split off into a reasoning field goes back in front
    as ``<think>…</think>``, so stored turns and distilled examples keep it."""
    content = message.content or ""
    reasoning = next((text for name in REASONING_FIELDS
                      if isinstance(text := getattr(message, name, None), str) and text.strip()), None)
    if reasoning is None or "<think>" in content:
        return content
    return f"<think>{reasoning.strip()}</think>{content.lstrip()}"
