"""The LLM bank editor: a chat model reads a batch's lessons plus the current bank and proposes edits.

Its answer (JSON, validated with pydantic and against the bank: UPDATE and REMOVE must name existing
entries, ADD needs a text) becomes ``Edit`` rows ADD / UPDATE / REMOVE / SKIP with the model's reasons.
Invalid answers are retried with the error shown to the model; when every attempt fails the batch keeps
the rule-based lesson edits and the failure is returned, so a bad model never corrupts the bank.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass, field
from typing import Literal

from pydantic import BaseModel, Field, ValidationError

from evoharness.consolidation.chat import ask_validated
from evoharness.consolidation.config import LLMSettings
from evoharness.consolidation.evolution import Edit
from evoharness.harness.experience import Category, ExperienceBankData
from evoharness.harness.prompts import PromptSet, load_prompt_set
from evoharness.teachers.clients.base import ChatClient
from evoharness.teachers.registry import TeacherSpec

PROMPT_ID = "consolidation/bank_edit"
_FENCE_RE = re.compile(r"^```(?:json)?\s*|\s*```$", re.MULTILINE)


class ProposedEdit(BaseModel):
    op: Literal["ADD", "UPDATE", "REMOVE", "SKIP"]
    category: Category
    entry_id: str | None = None
    text: str | None = Field(default=None, max_length=300)
    reason: str = Field(min_length=1, max_length=300)


class EditAnswer(BaseModel):
    edits: list[ProposedEdit]


class EditorAnswerError(ValueError):
    """The model's answer is not valid JSON, breaks the schema, or names entries the bank lacks."""


def parse_edits(answer_text: str, bank: ExperienceBankData) -> list[Edit]:
    """Validate an answer against the schema and the bank; returns the edits to apply."""
    try:
        answer = EditAnswer.model_validate(json.loads(_FENCE_RE.sub("", answer_text.strip())))
    except (json.JSONDecodeError, ValidationError) as exc:
        raise EditorAnswerError(f"not valid JSON of the required shape: {str(exc).splitlines()[0]}") from exc
    existing = {entry.entry_id: entry for entry in bank.entries}
    edits: list[Edit] = []
    for i, proposed in enumerate(answer.edits):
        old = existing.get(proposed.entry_id or "")
        if proposed.op in ("UPDATE", "REMOVE") and old is None:
            raise EditorAnswerError(f"edit {i}: {proposed.op} names {proposed.entry_id!r}, which is not in the bank")
        if proposed.op in ("ADD", "UPDATE") and not (proposed.text or "").strip():
            raise EditorAnswerError(f"edit {i}: {proposed.op} needs a text")
        text = " ".join((proposed.text or "").split()) or None
        entry_id: str | None = proposed.entry_id
        if proposed.op == "ADD":
            entry_id = "llm-" + hashlib.sha256(f"{proposed.category.value}:{text}".lower().encode()).hexdigest()[:8]
        category = old.category.value if old is not None and proposed.op != "ADD" else proposed.category.value
        edits.append(Edit(proposed.op, category, entry_id, text, old.text if old else None, proposed.reason, 1))
    return edits


@dataclass
class EditorResult:
    """The edits of one batch (empty when the model failed) and what the calls cost."""

    edits: list[Edit] = field(default_factory=list)
    failure: str | None = None
    attempts: int = 0
    input_tokens: int | None = None
    output_tokens: int | None = None
    cost_usd: float | None = None


@dataclass
class LLMBankEditor:
    """Proposes bank edits with a registered teacher's model."""

    client: ChatClient
    settings: LLMSettings
    teacher: TeacherSpec
    prompt_set: PromptSet = field(default_factory=lambda: load_prompt_set(PROMPT_ID))

    async def propose(self, bank: ExperienceBankData, lessons: list[str]) -> EditorResult:
        outcome = await ask_validated(
            self.client, self.teacher, self.settings,
            lambda error: self.prompt_set.render({}, {
                "bank_label": f"{bank.bank_id} v{bank.version}", "entries": bank.entries, "lessons": lessons,
                "error": error,
            }),
            lambda text: parse_edits(text, bank), EditorAnswerError,
            label=f"bank edit {bank.bank_id} v{bank.version}",
        )
        usage = outcome.usage
        return EditorResult(edits=outcome.value or [], failure=outcome.failure, attempts=outcome.attempts,
                            input_tokens=usage.input_tokens, output_tokens=usage.output_tokens,
                            cost_usd=usage.cost_usd)
