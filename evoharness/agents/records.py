"""Trajectory records: what the runner produces and the warehouse stores."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from datetime import datetime

from evoharness.envs.alfworld.catalog import GameRecord
from evoharness.harness.prompts import Mode


@dataclass(frozen=True)
class EpisodeSpec:
    """Everything that determines an episode. Its key makes reruns skip what is already stored."""

    teacher: str
    game: GameRecord
    mode: Mode
    seed: int
    max_steps: int
    prompt_id: str
    prompt_sha: str
    bank: str = ""  # the frozen Experience bank version ("alfworld-seed@v0"); "" in react mode

    @property
    def episode_id(self) -> str:
        key: dict[str, object] = {
            "teacher": self.teacher,
            "game_id": self.game.game_id,
            "seed": self.seed,
            "prompt_sha": self.prompt_sha,
            "mode": self.mode.value,
            "max_steps": self.max_steps,
        }
        if self.bank:
            key["bank"] = self.bank
        return hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:32]


@dataclass
class StepRecord:
    """One turn: the prompt seen, the raw output, how it parsed, and what came back."""

    t: int
    kind: str
    action: str
    argument: str | None
    think: str
    raw_output: str
    parse_error: str | None
    observation: str
    admissible: bool | None
    won: bool
    done: bool
    score: float | None
    prompt: str
    prompt_id: str
    prompt_sha: str
    latency_ms: float
    input_tokens: int | None = None
    output_tokens: int | None = None
    cost_usd: float | None = None
    label: str | None = None  # the expert's turn for this state (relabelled episodes only)
    turn_vars: str | None = None  # JSON of the prompt's turn variables, kept with a label to re-render it


@dataclass
class EpisodeRecord:
    """A whole episode. ``status`` is ``finished`` (played to done or budget) or ``failed`` (with a reason)."""

    spec: EpisodeSpec
    engine: str
    started_at: datetime
    finished_at: datetime | None = None
    status: str = "finished"
    failure_reason: str | None = None
    steps: list[StepRecord] = field(default_factory=list)
    objective: str | None = None  # the game's task as the environment stated it; None until the game opened

    @property
    def won(self) -> bool:
        return self.status == "finished" and any(step.won for step in self.steps)

    @property
    def n_harness_calls(self) -> int:
        return sum(step.kind in ("track", "commit", "recall", "note") for step in self.steps)

    def _total(self, attribute: str) -> float | None:
        values = [getattr(step, attribute) for step in self.steps]
        known = [v for v in values if v is not None]
        return sum(known) if known else None

    @property
    def input_tokens(self) -> int | None:
        total = self._total("input_tokens")
        return None if total is None else int(total)

    @property
    def output_tokens(self) -> int | None:
        total = self._total("output_tokens")
        return None if total is None else int(total)

    @property
    def cost_usd(self) -> float | None:
        return self._total("cost_usd")
