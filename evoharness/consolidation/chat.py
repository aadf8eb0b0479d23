"""One validated exchange with a registered teacher's model, shared by the LLM consolidation steps.

Transport faults (429, 5xx, timeouts) are retried by the teacher's retry policy; an answer that fails
``parse`` is asked again with the error shown to the model (the prompt renders ``error``), up to
``settings.max_attempts`` calls. Tokens and cost add up over every call.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from typing import Generic, TypeVar

from evoharness.consolidation.config import LLMSettings
from evoharness.harness.prompts import RenderedPrompt
from evoharness.teachers.clients.base import ChatClient, ClientError
from evoharness.teachers.llm import Usage
from evoharness.teachers.registry import TeacherSpec
from evoharness.teachers.retry import RetriesExhausted, with_retries

T = TypeVar("T")


@dataclass
class ChatOutcome(Generic[T]):
    """The parsed answer, or the failure (``client: …`` or ``invalid output after N attempts: …``)."""

    value: T | None
    failure: str | None
    attempts: int
    usage: Usage = field(default_factory=Usage)


async def ask_validated(
    client: ChatClient,
    teacher: TeacherSpec,
    settings: LLMSettings,
    render: Callable[[str | None], RenderedPrompt],
    parse: Callable[[str], T],
    invalid: type[Exception],
    label: str,
) -> ChatOutcome[T]:
    """Ask until ``parse`` accepts an answer, the attempts run out, or the transport gives up."""
    usage = Usage()
    error: str | None = None
    failure: str | None = None
    for attempt in range(1, settings.max_attempts + 1):
        call = partial(client.complete, render(error).messages(), max_tokens=settings.max_tokens,
                       temperature=settings.temperature)
        try:
            completion = await with_retries(call, teacher.retry, label=label)
        except (ClientError, RetriesExhausted) as exc:
            return ChatOutcome(None, f"client: {getattr(exc, 'reason', exc)}", attempt, usage)
        usage.add(completion, teacher)
        try:
            return ChatOutcome(parse(completion.text), None, attempt, usage)
        except invalid as exc:
            error = str(exc)
            failure = f"invalid output after {attempt} attempts: {error}"
    return ChatOutcome(None, failure, settings.max_attempts, usage)
