"""Maps HTTP failures of any provider onto :class:`TransientError` / :class:`PermanentError`."""

from __future__ import annotations

import email.utils
import time
from collections.abc import Mapping

from evoharness.teachers.clients.base import (
    AuthenticationFailure,
    ClientError,
    ContextTooLongError,
    ModelNotFound,
    PermanentError,
    TransientError,
)
from evoharness.teachers.clients.redact import Redactor, short

RETRYABLE_STATUS: frozenset[int] = frozenset({408, 409, 425, 429, 499})
CONTEXT_MARKERS: tuple[str, ...] = (
    "context_length_exceeded", "prompt is too long", "maximum context length", "context window",
    "too many tokens", "input is too long", "reduce the length",
)
# 429s that no amount of waiting fixes.
QUOTA_MARKERS: tuple[str, ...] = ("insufficient_quota", "spend limit", "billing")


def retry_after_seconds(headers: Mapping[str, str], now: float | None = None) -> float | None:
    """The server's retry hint: ``retry-after-ms``, else ``retry-after`` (seconds or an HTTP date)."""
    lowered = {k.lower(): v for k, v in headers.items()}
    if (ms := lowered.get("retry-after-ms")) is not None:
        try:
            return max(0.0, float(ms) / 1000)
        except ValueError:
            pass
    value = lowered.get("retry-after")
    if value is None:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        parsed = email.utils.parsedate_to_datetime(value) if value else None
        if parsed is None:
            return None
        return max(0.0, parsed.timestamp() - (time.time() if now is None else now))


def _error_text(body: object) -> str:
    """``error.message`` (+ ``code``/``type``) from an OpenAI- or Anthropic-shaped error body."""
    if isinstance(body, Mapping):
        error = body.get("error", body)
        if isinstance(error, Mapping):
            parts = [str(error.get(key)) for key in ("type", "code", "message") if error.get(key)]
            return ": ".join(parts)
        return str(error)
    return "" if body is None else str(body)


def status_error(
    status: int, headers: Mapping[str, str], body: object, redact: Redactor, provider: str
) -> ClientError:
    """The client error for an HTTP error response."""
    detail = short(redact(_error_text(body)))
    reason = f"{provider} HTTP {status}" + (f" ({detail})" if detail else "")
    lowered = detail.lower()
    if status in (400, 413, 422) and any(marker in lowered for marker in CONTEXT_MARKERS):
        return ContextTooLongError(f"context too long: {reason}")
    if status == 429 and any(marker in lowered for marker in QUOTA_MARKERS):
        return PermanentError(f"quota exhausted: {reason}")
    if status in (401, 403):
        return AuthenticationFailure(f"authentication failed: {reason}")
    if status == 404:
        return ModelNotFound(f"not found (model or endpoint): {reason}")
    if status in RETRYABLE_STATUS or status >= 500:
        return TransientError(reason, retry_after_seconds(headers))
    return PermanentError(reason)
