"""Anthropic Messages API through ``anthropic.AsyncAnthropic``."""

from __future__ import annotations

import time
from typing import Any

import anthropic

from evoharness.teachers.clients.base import Completion, TransientError
from evoharness.teachers.clients.redact import Redactor
from evoharness.teachers.clients.sdk import PerLoop, sdk_errors, translate


class AnthropicClient:
    """System messages go to the ``system`` parameter; the text blocks of the answer are joined."""

    def __init__(self, model: str, api_key: str, base_url: str | None = None, timeout_s: float = 60.0) -> None:
        self.model = model
        self._redact = Redactor([api_key])
        self._sdk = PerLoop(
            lambda: anthropic.AsyncAnthropic(api_key=api_key, base_url=base_url, timeout=timeout_s, max_retries=0)
        )

    async def aclose(self) -> None:
        await self._sdk.aclose()

    async def complete(
        self, messages: list[dict[str, str]], *, max_tokens: int, temperature: float | None
    ) -> Completion:
        system = "\n\n".join(m["content"] for m in messages if m["role"] == "system")
        chat = [{"role": m["role"], "content": m["content"]} for m in messages if m["role"] != "system"]
        kwargs: dict[str, Any] = {"model": self.model, "max_tokens": max_tokens, "messages": chat}
        if system:
            kwargs["system"] = system
        if temperature is not None:  # this SDK has no typed temperature parameter; the API field is sent raw
            kwargs["extra_body"] = {"temperature": temperature}
        started = time.perf_counter()
        try:
            message = await self._sdk.get().messages.create(**kwargs)
        except sdk_errors(anthropic) as exc:
            raise translate(exc, anthropic, self._redact, "anthropic") from None  # the SDK error holds headers
        latency_ms = (time.perf_counter() - started) * 1000
        content = getattr(message, "content", None)
        if content is None:
            raise TransientError("anthropic malformed response (no content)")
        usage = getattr(message, "usage", None)
        return Completion(
            text="".join(getattr(block, "text", "") for block in content if getattr(block, "type", "") == "text"),
            input_tokens=getattr(usage, "input_tokens", None),
            output_tokens=getattr(usage, "output_tokens", None),
            latency_ms=latency_ms,
            model=getattr(message, "model", None) or self.model,
            stop_reason=getattr(message, "stop_reason", None),
        )
