"""The BPE workspace of one episode: Belief + Progress + Experience, meta-action execution, prompt views."""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Any

from evoharness.envs.base import StepResult
from evoharness.harness.belief import Belief
from evoharness.harness.budget import StepBudget
from evoharness.harness.experience import ExperienceBank
from evoharness.harness.grammar import ActionKind, ParsedTurn
from evoharness.harness.progress import Progress
from evoharness.harness.prompts import Mode, PromptSet, RenderedPrompt


@dataclass
class Workspace:
    """Holds the episode's harness state and renders each turn's prompt.

    In ``react`` mode the harness views are not rendered and meta-actions are invalid.
    """

    mode: Mode
    belief: Belief
    bank: ExperienceBank
    budget: StepBudget
    prompt_set: PromptSet
    history_length: int = 10
    progress: Progress = field(default_factory=Progress)
    recent: deque[str] = field(default_factory=deque)

    def reset(self, first: StepResult) -> None:
        self.belief.reset(first.observation, first.objective)
        self.progress.reset()
        self.bank.notes.clear()
        self.recent = deque(maxlen=self.history_length)

    def render(self, current: StepResult, observation: str, steps_used: int) -> RenderedPrompt:
        """The prompt for the next turn; ``observation`` is the last env text or harness result."""
        return self.prompt_set.render(self.system_vars(), self.turn_vars(current, observation, steps_used))

    def system_vars(self) -> dict[str, Any]:
        return {"max_steps": self.budget.max_steps}

    def turn_vars(self, current: StepResult, observation: str, steps_used: int) -> dict[str, Any]:
        """Everything a turn template may show (JSON-serialisable): training examples keep it, so a student's
        own prompt set can re-render any stored turn."""
        turn_vars: dict[str, Any] = {
            "objective": current.objective,
            "step": steps_used + 1,
            "max_steps": self.budget.max_steps,
            "observation": observation,
            "admissible_commands": list(current.admissible_commands),
            "recent_actions": list(self.recent),
        }
        if self.mode is Mode.BPE:
            turn_vars |= {
                "belief": self.belief.render(),
                "belief_compact": self.belief.render_compact(),
                "belief_state": self.belief.snapshot(),
                "progress": self.progress.render(),
                "experience": self.bank.render(),
                "bank_label": self.bank.version_label,
                "notes_buffered": len(self.bank.notes),
            }
        return turn_vars

    def apply_meta(self, turn: ParsedTurn, t: int) -> str:
        """Execute a meta-action and return its result text (shown to the agent as the next observation)."""
        if self.mode is not Mode.BPE:
            raise ValueError("meta-actions are not available in react mode")
        if turn.kind is ActionKind.TRACK:
            return self.belief.track(turn.argument)
        if turn.kind is ActionKind.COMMIT:
            return self.progress.commit(turn.argument, t)
        if turn.kind is ActionKind.RECALL:
            return self.bank.recall(turn.argument)
        if turn.kind is ActionKind.NOTE:
            return self.bank.note(turn.argument)
        raise ValueError(f"{turn.kind} is not a meta-action")

    def observe(self, command: str, result: StepResult) -> None:
        """Feed an environment step to Belief."""
        self.belief.update(command, result.observation)

    def remember(self, action: str) -> None:
        self.recent.append(action)

    def snapshot(self) -> dict[str, Any]:
        return {
            "belief": self.belief.snapshot(),
            "progress": self.progress.snapshot(),
            "bank": self.bank.version_label,
            "notes": list(self.bank.notes),
        }
