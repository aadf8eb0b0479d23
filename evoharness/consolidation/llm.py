"""The LLM consolidator: a chat model proposes where meta-actions go, as JSON validated with pydantic.

Invalid output (not JSON, wrong schema, step numbers out of range) is retried with the error shown to the
model, up to ``max_attempts`` calls; then the episode is recorded as failed. Transient client errors are
retried by the registered teacher's retry policy (backoff, jitter, retry-after); permanent ones, or retries
exhausted, fail the episode at once. Tokens and cost add up over calls.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Literal

from pydantic import BaseModel, Field, ValidationError

from evoharness.consolidation.bank_editor import LLMBankEditor
from evoharness.consolidation.chat import ask_validated
from evoharness.consolidation.config import LLMSettings
from evoharness.consolidation.plan import Annotation, PlannedTurn, env_turns
from evoharness.consolidation.replay import Replay
from evoharness.consolidation.source import SourceEpisode
from evoharness.harness.grammar import ActionKind
from evoharness.harness.prompts import PromptSet, load_prompt_set
from evoharness.teachers.clients import make_client
from evoharness.teachers.clients.base import ChatClient
from evoharness.teachers.registry import TeacherRegistry, TeacherSpec

PROMPT_ID = "consolidation/annotate"
_FENCE_RE = re.compile(r"^```(?:json)?\s*|\s*```$", re.MULTILINE)


class Insertion(BaseModel):
    before_step: int = Field(ge=0)
    kind: Literal["recall", "commit", "note", "track"]
    argument: str
    think: str


class LLMAnnotation(BaseModel):
    insertions: list[Insertion]
    lessons: list[str] = Field(default_factory=list)


class AnnotationError(ValueError):
    """The model's answer is not a usable annotation."""


def parse_annotation(text: str, n_steps: int) -> LLMAnnotation:
    """Extract and validate the JSON annotation; raises :class:`AnnotationError` with a reason."""
    body = _FENCE_RE.sub("", text.strip())
    start, end = body.find("{"), body.rfind("}")
    if start < 0 or end < start:
        raise AnnotationError("no JSON object in the answer")
    try:
        annotation = LLMAnnotation.model_validate(json.loads(body[start:end + 1]))
    except json.JSONDecodeError as exc:
        raise AnnotationError(f"invalid JSON: {exc.msg} at char {exc.pos}") from exc
    except ValidationError as exc:
        raise AnnotationError(f"schema: {exc.errors()[0]['loc']}: {exc.errors()[0]['msg']}") from exc
    late = [i.before_step for i in annotation.insertions if i.before_step >= n_steps]
    if late:
        raise AnnotationError(f"before_step {late[0]} is not a step (the episode has steps 0..{n_steps - 1})")
    return annotation


def merge_turns(annotation: LLMAnnotation, replay: Replay) -> list[PlannedTurn]:
    """Interleave the insertions with the environment turns (insertions keep their order per step)."""
    turns: list[PlannedTurn] = []
    by_step: dict[int, list[Insertion]] = {}
    for insertion in annotation.insertions:
        by_step.setdefault(insertion.before_step, []).append(insertion)
    for index, env_turn in enumerate(env_turns(replay)):
        for ins in by_step.get(index, []):
            turns.append(PlannedTurn(ActionKind(ins.kind), ins.argument, ins.think))
        turns.append(env_turn)
    return turns


def build_llm_consolidator(settings: LLMSettings, registry: TeacherRegistry | None = None) -> LLMConsolidator:
    """The LLM consolidator backed by the registered teacher ``settings.teacher`` (key read from its env var)."""
    spec = (registry or TeacherRegistry.load()).get(settings.teacher)
    client = make_client(spec)
    return LLMConsolidator(client, settings, spec, bank_editor=LLMBankEditor(client, settings, spec))


@dataclass
class LLMConsolidator:
    """Annotates with a chat model through any :class:`ChatClient`."""

    client: ChatClient
    settings: LLMSettings
    teacher: TeacherSpec
    bank_editor: LLMBankEditor | None = None
    name: str = "llm"
    prompt_set: PromptSet = field(default_factory=lambda: load_prompt_set(PROMPT_ID))

    @property
    def model(self) -> str:
        return self.teacher.model or self.teacher.name

    @property
    def prompt_id(self) -> str:
        return self.prompt_set.prompt_id

    @property
    def prompt_sha(self) -> str:
        return self.prompt_set.sha256

    async def annotate(self, episode: SourceEpisode, replay: Replay) -> Annotation:
        steps = [{"index": i, "command": s.command, "observation": s.result.observation}
                 for i, s in enumerate(replay.steps)]
        outcome = await ask_validated(
            self.client, self.teacher, self.settings,
            lambda error: self.prompt_set.render({}, {
                "objective": replay.first.objective, "task_type": episode.task_type, "won": episode.won,
                "steps": steps, "error": error,
            }),
            lambda text: parse_annotation(text, len(steps)), AnnotationError,
            label=f"consolidate {episode.episode_id[:8]}",
        )
        usage = outcome.usage
        result = Annotation(attempts=outcome.attempts, input_tokens=usage.input_tokens,
                            output_tokens=usage.output_tokens, cost_usd=usage.cost_usd, failure=outcome.failure)
        if outcome.value is not None:
            result.turns, result.lessons = merge_turns(outcome.value, replay), list(outcome.value.lessons)
        return result
