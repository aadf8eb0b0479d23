"""Executes an annotation: replays the planned turns through a BPE workspace and renders every prompt.

Each turn yields one training example (the prompt the student will see and the target turn), the Belief,
Progress and recalled Experience as JSON, the engine facts at the same step, and the audit rows.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Any

from evoharness.agents.runner import INVALID_FEEDBACK
from evoharness.consolidation.checks import belief_checks, facts_json
from evoharness.consolidation.plan import PlannedTurn
from evoharness.consolidation.replay import Replay
from evoharness.consolidation.subgoals import check_subgoal
from evoharness.envs.alfworld.belief import AlfworldBelief
from evoharness.harness.budget import StepBudget
from evoharness.harness.experience import ExperienceBank, ExperienceBankData
from evoharness.harness.grammar import ActionKind, format_turn, parse_turn
from evoharness.harness.prompts import Mode, PromptSet
from evoharness.harness.workspace import Workspace


@dataclass
class EpisodeDigest:
    """What bank induction needs from one consolidated episode."""

    sightings: dict[str, str] = field(default_factory=dict)  # object -> receptacle where first seen
    taken_from: list[tuple[str, str]] = field(default_factory=list)  # (object, receptacle)
    opened_before_take: bool = False
    revisits: int = 0
    env_steps: int = 0
    verbs: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    usage: dict[str, int] = field(default_factory=dict)


@dataclass
class EpisodeExamples:
    examples: list[dict[str, Any]]
    belief_rows: list[dict[str, Any]]
    progress_rows: list[dict[str, Any]]
    digest: EpisodeDigest


def _normalise(text: str) -> str:
    return " ".join(text.strip().split()).lower()


def _recalled(before: dict[str, int], bank: ExperienceBank) -> list[dict[str, Any]]:
    after = {e.entry_id: e for e in bank.data.entries}
    return [
        {"entry_id": e.entry_id, "category": e.category.value, "text": e.text}
        for entry_id, e in after.items() if e.usage > before.get(entry_id, 0)
    ]


def build_examples(
    plan: list[PlannedTurn], replay: Replay, bank_data: ExperienceBankData, prompt_set: PromptSet,
    budget: StepBudget, keys: dict[str, Any],
) -> EpisodeExamples:
    """Run ``plan`` against ``replay``; ``keys`` (episode id, consolidator, …) are stamped on every row."""
    bank = ExperienceBank(copy.deepcopy(bank_data))
    start_usage = {e.entry_id: e.usage for e in bank.data.entries}
    belief = AlfworldBelief()
    workspace = Workspace(mode=Mode.BPE, belief=belief, bank=bank, budget=budget, prompt_set=prompt_set)
    workspace.reset(replay.first)
    current, facts, observation = replay.first, replay.first_facts, replay.first.observation
    env_done = 0
    examples: list[dict[str, Any]] = []
    belief_rows: list[dict[str, Any]] = []
    progress_rows: list[dict[str, Any]] = []
    digest = EpisodeDigest()
    visited: set[str] = set()
    opened: set[str] = set()
    for turn_index, planned in enumerate(plan):
        turn_vars = workspace.turn_vars(current, observation, turn_index)  # every planned turn costs one step
        prompt = prompt_set.render(workspace.system_vars(), turn_vars)
        belief_json, progress_json = belief.snapshot(), workspace.progress.snapshot()
        row_keys = keys | {"turn": turn_index}
        belief_rows.extend(check.row(**row_keys) for check in belief_checks(belief, facts))
        target = format_turn(planned.think, planned.action_text)
        parsed = parse_turn(target)
        parse_error = parsed.error
        if parse_error is None and (parsed.kind is not planned.kind or parsed.argument != _normalise(planned.argument)):
            parse_error = f"parsed as {parsed.kind.value} [{parsed.argument}], intended {planned.kind.value}"
        if parse_error is None and parsed.is_meta and not parsed.argument:
            parse_error = "meta-action without an argument"
        usage_before = {e.entry_id: e.usage for e in bank.data.entries}
        admissible: bool | None = None
        recalled: list[dict[str, Any]] = []
        if planned.kind is ActionKind.ENV:
            if planned.env_index is None:
                raise ValueError("an env turn needs env_index")
            step = replay.steps[planned.env_index]
            admissible = step.command in current.admissible_commands
            current, facts, observation = step.result, step.facts, step.result.observation
            workspace.observe(step.command, current)
            env_done += 1
            _digest_env(digest, step.command, observation, visited, opened)
            for obj, place in belief.located.items():
                digest.sightings.setdefault(obj, place)
        elif parse_error is None:
            if parsed.kind is ActionKind.COMMIT:
                for goal in workspace.progress.open_subgoals():
                    check = check_subgoal(goal.text, facts)
                    progress_rows.append(row_keys | {"subgoal": goal.text, "form": check.form, "holds": check.holds,
                                                     "detail": check.detail})
            observation = workspace.apply_meta(parsed, turn_index)
            recalled = _recalled(usage_before, bank)
            if parsed.kind is ActionKind.NOTE:
                digest.notes.append(parsed.argument)
        else:
            observation = INVALID_FEEDBACK.format(reason=parse_error)
        workspace.remember(planned.action_text if parse_error is None else "(invalid)")
        examples.append(row_keys | {
            "source_t": replay.steps[planned.env_index].source_t if planned.env_index is not None else None,
            "env_step": env_done - (planned.kind is ActionKind.ENV),
            "kind": planned.kind.value, "action": planned.action_text, "argument": planned.argument or None,
            "system_prompt": prompt.system, "user_prompt": prompt.user, "target": target, "result": observation,
            "parse_ok": parse_error is None, "parse_error": parse_error, "admissible": admissible,
            "belief_json": belief_json, "progress_json": progress_json,
            "experience_json": {"bank": bank.version_label, "recalled": recalled, "notes": list(bank.notes)},
            "facts_json": facts_json(facts), "prompt_id": prompt.prompt_id, "prompt_sha": prompt.prompt_sha,
            "turn_vars": turn_vars,
        })
    digest.env_steps = env_done
    digest.usage = {e.entry_id: e.usage - start_usage.get(e.entry_id, 0)
                    for e in bank.data.entries if e.usage > start_usage.get(e.entry_id, 0)}
    return EpisodeExamples(examples, belief_rows, progress_rows, digest)


def _digest_env(digest: EpisodeDigest, command: str, observation: str, visited: set[str], opened: set[str]) -> None:
    verb = command.split(" ", 1)[0]
    digest.verbs.append(verb)
    if command.startswith("go to "):
        place = command[6:]
        digest.revisits += place in visited
        visited.add(place)
    elif verb == "open":
        opened.add(command[5:])
    elif verb == "take" and observation.startswith("You pick up"):
        obj, _, place = command[5:].partition(" from ")
        digest.taken_from.append((obj, place))
        digest.opened_before_take = digest.opened_before_take or place in opened
