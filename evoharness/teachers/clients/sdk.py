"""Shared plumbing of the SDK-backed clients: one SDK client per event loop, failure translation."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from typing import Any, Generic, TypeVar

from evoharness.teachers.clients.base import ClientError, ConnectionFailure, PermanentError, TransientError
from evoharness.teachers.clients.errors import status_error
from evoharness.teachers.clients.redact import Redactor, short

SDK = TypeVar("SDK")


class PerLoop(Generic[SDK]):
    """Builds the SDK client lazily for the running event loop (an httpx pool must not outlive its loop)."""

    def __init__(self, factory: Callable[[], SDK]) -> None:
        self._factory = factory
        self._loop: asyncio.AbstractEventLoop | None = None
        self._client: SDK | None = None

    def get(self) -> SDK:
        loop = asyncio.get_running_loop()
        if self._client is None or self._loop is not loop:
            self._client, self._loop = self._factory(), loop
        return self._client

    async def aclose(self) -> None:
        """Close the client's connections (call on the loop that used it, before the loop ends)."""
        client, self._client, self._loop = self._client, None, None
        if client is not None:
            await client.close()  # type: ignore[attr-defined]


def translate(exc: BaseException, sdk: Any, redact: Redactor, provider: str) -> ClientError:
    """Map an ``anthropic``/``openai`` exception (same class names in both SDKs) to a client error."""
    if isinstance(exc, sdk.APITimeoutError):
        return ConnectionFailure(f"{provider} request timed out")
    if isinstance(exc, sdk.APIConnectionError):
        cause = exc.__cause__ or exc.__context__
        what = f"{type(cause).__name__}: {cause}" if cause is not None else str(exc)
        return ConnectionFailure(f"{provider} connection error ({short(redact(what))})")
    if isinstance(exc, sdk.APIStatusError):
        return status_error(exc.status_code, exc.response.headers, exc.body, redact, provider)
    if isinstance(exc, (sdk.APIResponseValidationError, json.JSONDecodeError, UnicodeDecodeError)):
        return TransientError(f"{provider} malformed response body ({type(exc).__name__})")
    if isinstance(exc, sdk.APIError):
        return PermanentError(f"{provider} API error ({type(exc).__name__}: {short(redact(exc))})")
    raise TypeError(f"not an SDK error: {type(exc).__name__}")


def sdk_errors(sdk: Any) -> tuple[type[BaseException], ...]:
    """The exception types :func:`translate` understands."""
    return (sdk.APIError, json.JSONDecodeError, UnicodeDecodeError)
