"""``LLMTeacher``: a policy backed by any :class:`ChatClient` (frontier API, compatible server, local model).

It renders nothing itself: it sends ``context.prompt.messages()`` and returns the answer's text with
tokens and cost. Transient failures are retried (see :mod:`evoharness.teachers.retry`); a call that cannot
succeed raises :class:`PolicyError`, which fails the episode with its reason. Empty answers and refusals
are re-asked a bounded number of times and then returned as text, so the runner records an invalid turn.
"""

from __future__ import annotations

import logging
import random
from dataclasses import dataclass, field

from evoharness.harness.prompts import Mode
from evoharness.teachers.base import PolicyError, PolicyOutput, TurnContext
from evoharness.teachers.clients.base import (
    AuthenticationFailure,
    ChatClient,
    ClientError,
    Completion,
    ConnectionFailure,
    ModelNotFound,
    aclose_client,
)
from evoharness.teachers.clients.constrained import ActionSpace, RepeatGuard
from evoharness.teachers.registry import TeacherSpec
from evoharness.teachers.retry import Cooldown, RetriesExhausted, with_retries

logger = logging.getLogger(__name__)
REFUSAL_TEXT = "[refusal]"


@dataclass
class Usage:
    """Tokens and cost summed over every attempt of one turn that reported usage."""

    input_tokens: int | None = None
    output_tokens: int | None = None
    cost_usd: float | None = None

    def add(self, completion: Completion, spec: TeacherSpec) -> None:
        if completion.input_tokens is not None:
            self.input_tokens = (self.input_tokens or 0) + completion.input_tokens
        if completion.output_tokens is not None:
            self.output_tokens = (self.output_tokens or 0) + completion.output_tokens
        cost = spec.cost_usd(completion.input_tokens, completion.output_tokens)
        if cost is not None:
            self.cost_usd = (self.cost_usd or 0.0) + cost


@dataclass
class LLMSession:
    """One episode of an :class:`LLMTeacher`."""

    teacher: LLMTeacher
    episode_id: str
    repeats: RepeatGuard | None = None  # set when the spec avoids repeats

    async def act(self, context: TurnContext) -> PolicyOutput:
        spec, usage = self.teacher.spec, Usage()
        label = f"{spec.name} episode {self.episode_id[:8]} turn {context.t}"
        refusals = empties = 0
        observation = context.result.observation  # the environment's last (a meta-action's result is not)
        admissible = tuple(context.result.admissible_commands)
        commands = admissible if self.repeats is None else self.repeats.commands(admissible, observation)
        while True:
            space = ActionSpace(commands, meta=context.mode is Mode.BPE) if spec.constrain_actions else None
            completion = await self.teacher.call(context.prompt.messages(), label, space)
            usage.add(completion, spec)
            if completion.refused and refusals < spec.retry.refusal_retries:
                refusals += 1
                logger.warning("%s: refusal (%s); asking again", label, completion.stop_reason)
                continue
            if not completion.text.strip() and not completion.refused and empties < spec.retry.empty_retries:
                empties += 1
                logger.warning("%s: empty answer (stop %s); asking again", label, completion.stop_reason)
                continue
            break
        text = completion.text
        if self.repeats is not None:
            self.repeats.record(text, observation, admissible)
        if completion.refused:
            logger.warning("%s: refusal kept as an invalid turn", label)
            text = text or REFUSAL_TEXT
        return PolicyOutput(text, usage.input_tokens, usage.output_tokens, usage.cost_usd)


@dataclass
class LLMTeacher:
    """A registered model teacher; ``client`` speaks its provider's API."""

    spec: TeacherSpec
    client: ChatClient
    mode: Mode = Mode.BPE
    needs_expert: bool = False
    cooldown: Cooldown = field(default_factory=Cooldown)
    rng: random.Random = field(default_factory=random.Random)
    name: str = field(init=False)

    def __post_init__(self) -> None:
        self.name = self.spec.name

    def start_episode(self, episode_id: str, objective: str) -> LLMSession:
        return LLMSession(self, episode_id, RepeatGuard() if self.spec.avoid_repeats else None)

    async def aclose(self) -> None:
        """Close the client's connections; call on the event loop that ran the episodes."""
        await aclose_client(self.client)

    async def call(self, messages: list[dict[str, str]], label: str,
                   action_space: ActionSpace | None = None) -> Completion:
        """One completion with retries; :class:`PolicyError` when it cannot be had. ``action_space`` reaches
        clients that decode constrained (local models); the others never see it."""
        spec = self.spec
        options = {"action_space": action_space} if action_space is not None else {}
        try:
            return await with_retries(
                lambda: self.client.complete(messages, max_tokens=spec.max_tokens, temperature=spec.temperature,
                                             **options),
                spec.retry, cooldown=self.cooldown, rng=self.rng, label=label,
            )
        except ClientError as exc:  # permanent: bad request, auth, context too long
            raise PolicyError(exc.reason, failure_kind(exc)) from None  # reasons are redacted; SDK errors hold headers
        except RetriesExhausted as exc:
            raise PolicyError(str(exc), failure_kind(exc.__cause__)) from None


def failure_kind(exc: BaseException | None) -> str | None:
    """``connection`` / ``auth`` / ``not_found`` for failures of the whole teacher, None for one call's."""
    if isinstance(exc, ConnectionFailure):
        return "connection"
    if isinstance(exc, AuthenticationFailure):
        return "auth"
    if isinstance(exc, ModelNotFound):
        return "not_found"
    return None
