"""The interface every chat client implements: messages in, text + token usage + latency out."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol


@dataclass(frozen=True)
class Completion:
    """One model answer. Token counts are the provider's own (None where it reports none)."""

    text: str
    input_tokens: int | None
    output_tokens: int | None
    latency_ms: float
    model: str
    stop_reason: str | None = None


class ChatClient(Protocol):
    """``messages`` are ``{"role": "system"|"user"|"assistant", "content": str}`` dicts."""

    async def complete(self, messages: list[dict[str, str]], *, max_tokens: int, temperature: float) -> Completion:
        ...
