"""The interface every chat client implements: messages in, text + token usage + latency out.

Clients translate their SDK's failures into two kinds: :class:`TransientError` (retrying may help: 429,
5xx, timeouts, connection resets, truncated or malformed bodies) and :class:`PermanentError` (it will not:
bad request, auth, context too long). Error texts are built by the client and pass through the redactor,
so they never carry an API key.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

REFUSAL_STOP_REASONS: frozenset[str] = frozenset({"refusal", "content_filter"})


@dataclass(frozen=True)
class Completion:
    """One model answer. Token counts are the provider's own (None where it reports none)."""

    text: str
    input_tokens: int | None
    output_tokens: int | None
    latency_ms: float
    model: str
    stop_reason: str | None = None

    @property
    def refused(self) -> bool:
        """The provider declined to answer (Anthropic ``refusal``, OpenAI ``refusal``/``content_filter``)."""
        return self.stop_reason in REFUSAL_STOP_REASONS


class ChatClient(Protocol):
    """``messages`` are ``{"role": "system"|"user"|"assistant", "content": str}`` dicts.

    ``temperature=None`` means the provider's default (some models reject an explicit temperature).
    Clients may also implement ``async aclose()`` to release connections (see :func:`aclose_client`).
    """

    async def complete(
        self, messages: list[dict[str, str]], *, max_tokens: int, temperature: float | None
    ) -> Completion:
        ...


async def aclose_client(client: object) -> None:
    """Close ``client``'s connections if it has any (clients may implement ``async aclose()``)."""
    aclose = getattr(client, "aclose", None)
    if aclose is not None:
        await aclose()


class ClientError(Exception):
    """A call failed; ``reason`` is a short, key-free description."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class TransientError(ClientError):
    """Retrying may help. ``retry_after_s`` is the server's own hint (429 ``retry-after``), if any."""

    def __init__(self, reason: str, retry_after_s: float | None = None) -> None:
        super().__init__(reason)
        self.retry_after_s = retry_after_s


class PermanentError(ClientError):
    """Retrying the same request will not help (bad request, auth, unknown model)."""


class ConnectionFailure(TransientError):
    """The server could not be reached or did not answer in time (refused, reset, DNS, timeout)."""


class AuthenticationFailure(PermanentError):
    """The server rejected the key (HTTP 401/403)."""


class ModelNotFound(PermanentError):
    """The server does not serve the requested model (HTTP 404)."""


class ContextTooLongError(PermanentError):
    """The prompt does not fit the model's context window."""
