"""Decision metrics on held-out turns: does the student choose what the teacher chose?

Loss and token accuracy are dominated by the templated thought; an episode is won by about 25 right
decisions in a row. Each held-out turn is generated greedily (with the same constrained decoding the
student plays with) and its action compared with the teacher's: the exact action, the kind (env or which
meta-action), the verb, and the objects and places it names (``cup 2``, ``countertop 1``).
"""

from __future__ import annotations

import json
import re
from collections import Counter
from typing import Any

from evoharness.harness.grammar import ActionKind, parse_turn
from evoharness.teachers.clients.constrained import ActionConstraint, ActionSpace
from evoharness.teachers.clients.hf_batching import BatchGenerator, Sampling

_ENTITY_RE = re.compile(r"[a-z]+ \d+")


def entities(action: str) -> frozenset[str]:
    """The objects and places an action names ('take cup 2 from countertop 1' → {cup 2, countertop 1})."""
    return frozenset(_ENTITY_RE.findall(action))


def decision_metrics(model: Any, tokenizer: Any, rows: list[dict[str, Any]], *, constrained: bool = True,
                     max_new_tokens: int = 96, batch_size: int = 16) -> dict[str, float]:
    """Greedy decisions on ``rows`` (prompt-completion examples with ``turn_vars``) against the teacher's.

    Returns ``decision/action_accuracy``, ``decision/kind_accuracy``, ``decision/verb_accuracy``,
    ``decision/entity_accuracy`` (env turns that name objects or places), ``decision/invalid_rate``,
    ``decision/env_action_accuracy`` and ``decision/goto_accuracy`` (the search and navigation turns); every rate is over the turns it applies to, absent when none does."""
    generator = BatchGenerator(model, tokenizer, max_batch=batch_size)
    was_training = model.training
    model.eval()
    counts: Counter[str] = Counter()
    try:
        for start in range(0, len(rows), batch_size):
            batch = rows[start:start + batch_size]
            prompts = [tokenizer.apply_chat_template(row["prompt"], add_generation_prompt=True, tokenize=True,
                                                     return_dict=True)["input_ids"] for row in batch]
            constraints = [_constraint(tokenizer, row) if constrained else None for row in batch]
            outputs = generator.run_batch(prompts, Sampling(max_new_tokens), constraints)
            for row, output in zip(batch, outputs, strict=True):
                _score(counts, parse_turn(row["completion"][-1]["content"]),
                       parse_turn(tokenizer.decode(output, skip_special_tokens=True)))
    finally:
        model.train(was_training)
    return _rates(counts)


def _constraint(tokenizer: Any, row: dict[str, Any]) -> ActionConstraint:
    turn_vars = json.loads(row["turn_vars"])
    return ActionConstraint(tokenizer, ActionSpace(tuple(turn_vars["admissible_commands"]),
                                                   meta="belief_compact" in turn_vars or "belief" in turn_vars))


def _score(counts: Counter[str], target: Any, chosen: Any) -> None:
    counts["turns"] += 1
    counts["invalid"] += chosen.kind is ActionKind.INVALID
    counts["action"] += chosen.action == target.action
    counts["kind"] += chosen.kind is target.kind
    counts["verb"] += chosen.action.split(" ", 1)[0] == target.action.split(" ", 1)[0]
    if target.kind is ActionKind.ENV:
        counts["env_turns"] += 1
        counts["env_action"] += chosen.action == target.action
        if target.action.startswith("go to "):
            counts["goto_turns"] += 1
            counts["goto"] += chosen.action == target.action
        if wanted := entities(target.action):
            counts["entity_turns"] += 1
            counts["entity"] += entities(chosen.action) == wanted


def _rates(counts: Counter[str]) -> dict[str, float]:
    rates = {}
    for name, total in (("action", "turns"), ("kind", "turns"), ("verb", "turns"), ("invalid", "turns"),
                        ("env_action", "env_turns"), ("goto", "goto_turns"),
                        ("entity", "entity_turns")):
        if counts[total]:
            key = "invalid_rate" if name == "invalid" else f"{name}_accuracy"
            rates[f"decision/{key}"] = counts[name] / counts[total]
    if counts["turns"]:
        rates["decision/turns"] = float(counts["turns"])
    return rates
