"""The episode's step budget: environment commands and (by default) meta-actions each cost steps."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class StepBudget:
    """``max_steps`` turns per episode; a meta-action costs ``meta_action_cost`` (0 makes them free)."""

    max_steps: int = 70
    meta_action_cost: int = 1
    invalid_cost: int = 1

    def __post_init__(self) -> None:
        if self.max_steps < 1:
            raise ValueError("max_steps must be at least 1")
        if self.meta_action_cost < 0 or self.invalid_cost < 0:
            raise ValueError("step costs cannot be negative")
