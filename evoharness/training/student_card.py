"""The card saved beside a trained student: how it was trained and which prompt set it plays with.

A student trained on a re-rendered dataset (its own prompt set, e.g. ``alfworld/bpe_compact``) must see the
same rendering when it plays; evaluation and GRPO rollouts read the prompt set from here.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from evoharness.harness.prompts import Mode, load_prompt_set

CARD_FILE = "evoharness_student.json"


def write_student_card(model_dir: str | Path, prompt_set: str | None, details: dict[str, Any]) -> None:
    """Record ``prompt_set`` (None: the teacher's rendering) with its sha256, and ``details``."""
    card: dict[str, Any] = {"prompt_set": prompt_set, "prompt_sha": None} | details
    if prompt_set is not None:
        card["prompt_sha"] = load_prompt_set(prompt_set).sha256
    (Path(model_dir) / CARD_FILE).write_text(json.dumps(card, indent=1))


def read_student_card(model_dir: str | Path) -> dict[str, Any]:
    path = Path(model_dir) / CARD_FILE
    return json.loads(path.read_text()) if path.is_file() else {}


def student_prompt_set(model_dir: str | Path, mode: Mode) -> str:
    """The prompt set the student at ``model_dir`` was trained with (the teacher's ``alfworld/<mode>`` if none)."""
    trained = read_student_card(model_dir).get("prompt_set")
    return str(trained) if trained else f"alfworld/{mode.value}"
