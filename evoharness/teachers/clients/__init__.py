"""Chat clients behind one interface: Anthropic, OpenAI, OpenAI-compatible servers, local HF models."""

from __future__ import annotations

from typing import TYPE_CHECKING

from evoharness.teachers.clients.base import (
    ChatClient,
    ClientError,
    Completion,
    ContextTooLongError,
    PermanentError,
    TransientError,
)

if TYPE_CHECKING:
    from evoharness.teachers.registry import TeacherSpec

__all__ = ["ChatClient", "ClientError", "Completion", "ContextTooLongError", "PermanentError", "TransientError",
           "make_client"]


def make_client(spec: TeacherSpec) -> ChatClient:
    """The client for a registry entry; reads the key from the entry's env var now (fails fast if unset)."""
    from evoharness.teachers.registry import Provider

    api_key = spec.api_key()
    timeout = spec.retry.timeout_s
    if spec.model is None:
        raise ValueError(f"Teacher {spec.name!r} has no model.")
    if spec.provider is Provider.ANTHROPIC:
        from evoharness.teachers.clients.anthropic_client import AnthropicClient

        return AnthropicClient(spec.model, api_key or "", spec.base_url, timeout)
    if spec.provider in (Provider.OPENAI, Provider.OPENAI_COMPATIBLE):
        from evoharness.teachers.clients.openai_client import OpenAIChatClient

        token_param = "max_completion_tokens" if spec.provider is Provider.OPENAI else "max_tokens"
        return OpenAIChatClient(spec.model, api_key, spec.base_url, timeout, token_param, spec.provider.value,
                                spec.structured_outputs)
    if spec.provider is Provider.LOCAL_HF:
        from evoharness.teachers.clients.local_hf import LocalHFClient

        return LocalHFClient(spec.model, max_batch=spec.max_concurrency)
    raise ValueError(f"Teacher {spec.name!r} (provider {spec.provider.value}) has no chat client.")
