"""Per-turn prompt rendering from the versioned templates in ``teacher_prompts/``.

The prompt is rebuilt every turn (not an ever-growing chat): a system text and one user message.
Each render carries the prompt set's id and the sha256 of its template files.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass, field
from enum import StrEnum
from functools import cache
from pathlib import Path
from typing import Any

import jinja2


class Mode(StrEnum):
    """``bpe``: the full workspace and meta-actions; ``react``: the plain baseline."""

    BPE = "bpe"
    REACT = "react"


def prompts_dir() -> Path:
    """``$EVOHARNESS_PROMPTS`` or the repository's ``teacher_prompts/`` folder."""
    override = os.environ.get("EVOHARNESS_PROMPTS")
    path = Path(override) if override else Path(__file__).resolve().parents[2] / "teacher_prompts"
    if not path.is_dir():
        raise FileNotFoundError(f"Prompt folder {path} not found; set EVOHARNESS_PROMPTS to teacher_prompts/.")
    return path


@dataclass(frozen=True)
class RenderedPrompt:
    """One turn's prompt: chat messages plus the lineage of the templates that made them."""

    system: str
    user: str
    prompt_id: str
    prompt_sha: str
    turn_vars: dict[str, Any] = field(default_factory=dict, compare=False)  # what the turn template was given

    def messages(self) -> list[dict[str, str]]:
        return [{"role": "system", "content": self.system}, {"role": "user", "content": self.user}]

    @property
    def text(self) -> str:
        """The whole prompt as one string (what the warehouse stores)."""
        return f"{self.system}\n\n{self.user}"


@dataclass(frozen=True)
class PromptSet:
    """A system template and a turn template, loaded from files and identified by id + sha256."""

    prompt_id: str
    system_template: jinja2.Template
    turn_template: jinja2.Template
    sha256: str

    def render(self, system_vars: dict[str, Any], turn_vars: dict[str, Any]) -> RenderedPrompt:
        return RenderedPrompt(
            system=self.system_template.render(**system_vars).strip(),
            user=self.turn_template.render(**turn_vars).strip(),
            prompt_id=self.prompt_id,
            prompt_sha=self.sha256,
            turn_vars=turn_vars,
        )


@cache
def load_prompt_set(prompt_id: str, root: Path | None = None) -> PromptSet:
    """Load ``<root>/<prompt_id>.system.j2`` and ``.turn.j2`` (e.g. ``alfworld/bpe``)."""
    base = root or prompts_dir()
    paths = [base / f"{prompt_id}.system.j2", base / f"{prompt_id}.turn.j2"]
    missing = [str(p) for p in paths if not p.is_file()]
    if missing:
        raise FileNotFoundError(f"Prompt set {prompt_id!r} is incomplete: missing {', '.join(missing)}")
    sources = [p.read_bytes() for p in paths]
    digest = hashlib.sha256(b"\0".join(sources)).hexdigest()
    env = jinja2.Environment(undefined=jinja2.StrictUndefined, keep_trailing_newline=False, autoescape=False)
    system, turn = (env.from_string(src.decode()) for src in sources)
    return PromptSet(prompt_id=prompt_id, system_template=system, turn_template=turn, sha256=digest)
