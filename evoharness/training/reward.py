"""The cost-aware trajectory reward of EvoHarness-RL, one function per term.

R = 10·solved + λ_eff·max(0, 1 − |τ|/T_max)·solved + λ_div(u)·R_div − 0.1·min(repeats, 10) − 0.1·invalid
    − λ_call·harness_calls + λ_prog·progress

(λ_prog = 0 is the paper's reward; progress, 0 to 1, is how far towards its goal an episode got, 1 when won:
evoharness.envs.alfworld.goals)

with R_div = distinct action verbs / |τ| and λ_div(u) = (λ_max/2)(1 + cos(πu/U)), annealed to 0 over U
epochs. |τ| counts the trajectory's turns (environment actions, meta-actions and invalid turns alike: each
spends budget). A *repeat* is a turn that issues an action (a meta-action with its argument) already issued at
the same environment observation earlier in the trajectory — it can bring nothing new. The observation is the
environment's last one: a meta-action's result does not change the world, so slipping a ``track`` between two
visits of the same places does not make the second round new (a policy learnt exactly that dodge when the
harness result counted as the observation: docs/results.md, GRPO). Every term is its own TRL reward function (so TRL
logs each one
separately as ``rewards/<name>/mean``); their sum with unit weights is R.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from functools import partial
from typing import Any, ClassVar, Literal

from pydantic import BaseModel, Field

from evoharness.agents.records import EpisodeRecord
from evoharness.envs.alfworld.goals import Goal, goal_progress, goal_reach


class RewardConfig(BaseModel):
    """Weights of the reward terms (defaults: the paper's, with λ_call = 0)."""

    solved_bonus: float = 10.0
    efficiency_weight: float = Field(default=1.0, description="λ_eff.")
    t_max: int | None = Field(default=None, ge=1, description="T_max; None: the episode's step cap.")
    diversity_max: float = Field(default=0.5, ge=0, description="λ_max (paper 0.5; the code release uses 1.0).")
    diversity_epochs: float = Field(default=150, gt=0, description="U: epochs over which λ_div anneals to 0.")
    repeat_penalty: float = 0.1
    repeat_cap: int = Field(default=10, ge=0, description=(
        "Repeats the penalty counts (paper 10: a 42-repeat loop costs what a 10-repeat one does; the episode "
        "step cap counts every repeat)."))
    invalid_penalty: float = 0.1
    call_cost: float = Field(default=0.0, ge=0, description="λ_call per harness call (documented alternative 0.05).")
    call_cost_ramp_steps: int | None = Field(default=None, ge=1, description=(
        "Anneal λ_call in: 0 at step 0, rising linearly to call_cost at this optimizer step, so that the policy "
        "first keeps its wins and then drops the calls that do not help them; None: call_cost throughout."))
    progress_weight: float = Field(default=0.0, ge=0, description=(
        "λ_prog: a reward of λ_prog × how far towards its goal an episode got (0 target never seen ... 1 every step "
        "done, 1 when won; evoharness.envs.alfworld.goals), so that GRPO tells lost episodes apart by how far they "
        "got; 0: the paper's reward. ALFWorld goals only."))
    repeats_at: Literal["environment", "any"] = Field(default="environment", description=(
        "The observation a repeat is judged at: the environment's last one, or 'any' last observation, a "
        "meta-action's result included (then a meta-action between two visits makes the second round look new, "
        "and a policy learns that dodge: docs/results.md, GRPO)."))

    ID_OMITTED_WHEN_OFF: ClassVar[frozenset[str]] = frozenset({"call_cost_ramp_steps", "progress_weight"})
    """Switches added after versions were trained: left out of a version's id while off."""

    def call_weight(self, step: int) -> float:
        """λ_call at optimizer step ``step``."""
        if self.call_cost_ramp_steps is None:
            return self.call_cost
        return self.call_cost * min(1.0, max(step, 0) / self.call_cost_ramp_steps)


@dataclass(frozen=True)
class TrajectoryStats:
    """What the reward needs from one played episode."""

    won: bool
    turns: int
    max_steps: int
    distinct_verbs: int
    repeats: int
    invalid: int
    harness_calls: int
    progress: float | None = None  # how far towards its goal, 0 to 1; None where not computed

    @classmethod
    def from_record(cls, record: EpisodeRecord, repeats_at: str = "environment",
                    with_progress: bool = False) -> TrajectoryStats:
        """The stats of a played episode; ``with_progress`` reads its goal progress too (ALFWorld objectives)."""
        seen: set[tuple[str, str]] = set()
        repeats, observation = 0, ""
        for step in record.steps:
            key = (step.action, observation)  # a meta-action's action text includes its argument
            repeats += key in seen and step.kind != "invalid"
            seen.add(key)
            if step.kind == "env" or repeats_at == "any":
                observation = step.observation or ""
        verbs = {step.action.split()[0] for step in record.steps if step.action and step.kind != "invalid"}
        return cls(won=record.won, turns=len(record.steps), max_steps=record.spec.max_steps,
                   distinct_verbs=len(verbs), repeats=repeats,
                   invalid=sum(step.kind == "invalid" for step in record.steps),
                   harness_calls=record.n_harness_calls, progress=_progress(record) if with_progress else None)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def _progress(record: EpisodeRecord) -> float:
    """How far towards its goal an episode got: 1 when won, else its stage's place among the goal's stages."""
    if record.won:
        return 1.0
    if record.objective is None:
        raise ValueError(f"episode {record.spec.episode_id} has no objective to measure its progress against")
    goal = Goal.parse(record.objective)
    return goal_progress(goal, goal_reach(goal, [(s.action, s.observation) for s in record.steps if s.kind == "env"]))


def diversity_weight(epoch: float, config: RewardConfig) -> float:
    """λ_div(u) = (λ_max/2)(1 + cos(πu/U)), held at 0 after U epochs."""
    u = min(max(epoch, 0.0), config.diversity_epochs)
    return config.diversity_max / 2 * (1 + math.cos(math.pi * u / config.diversity_epochs))


def _stats(trajectory: Sequence[dict[str, Any]]) -> list[TrajectoryStats]:
    return [TrajectoryStats(**t) for t in trajectory]


def _epoch(trainer_state: Any) -> float:
    return float(getattr(trainer_state, "epoch", None) or 0.0)


def solved_reward(trajectory: Sequence[dict[str, Any]], config: RewardConfig, **_: Any) -> list[float]:
    return [config.solved_bonus * s.won for s in _stats(trajectory)]


def efficiency_reward(trajectory: Sequence[dict[str, Any]], config: RewardConfig, **_: Any) -> list[float]:
    return [config.efficiency_weight * max(0.0, 1 - s.turns / (config.t_max or s.max_steps)) * s.won
            for s in _stats(trajectory)]


def diversity_reward(trajectory: Sequence[dict[str, Any]], config: RewardConfig, trainer_state: Any = None,
                     **_: Any) -> list[float]:
    weight = diversity_weight(_epoch(trainer_state), config)
    return [weight * s.distinct_verbs / s.turns if s.turns else 0.0 for s in _stats(trajectory)]


def repeat_penalty(trajectory: Sequence[dict[str, Any]], config: RewardConfig, **_: Any) -> list[float]:
    return [-config.repeat_penalty * min(s.repeats, config.repeat_cap) for s in _stats(trajectory)]


def invalid_penalty(trajectory: Sequence[dict[str, Any]], config: RewardConfig, **_: Any) -> list[float]:
    return [-config.invalid_penalty * s.invalid for s in _stats(trajectory)]


def harness_call_cost(trajectory: Sequence[dict[str, Any]], config: RewardConfig, trainer_state: Any = None,
                      **_: Any) -> list[float]:
    weight = config.call_weight(int(getattr(trainer_state, "global_step", None) or 0))
    return [-weight * s.harness_calls for s in _stats(trajectory)]


def progress_reward(trajectory: Sequence[dict[str, Any]], config: RewardConfig, **_: Any) -> list[float]:
    if not config.progress_weight:
        return [0.0] * len(trajectory)
    stats = _stats(trajectory)
    if any(s.progress is None for s in stats):
        raise ValueError("progress_weight > 0 needs each episode's goal progress (TrajectoryStats.from_record "
                         "with_progress=True)")
    return [config.progress_weight * (s.progress or 0.0) for s in stats]


TERMS = (solved_reward, efficiency_reward, diversity_reward, repeat_penalty, invalid_penalty, harness_call_cost,
         progress_reward)


def reward_functions(config: RewardConfig) -> list[Callable[..., list[float]]]:
    """The terms as TRL reward functions (named after the term; they read the ``trajectory`` column)."""
    return [partial(term, config=config) for term in TERMS]


def trajectory_reward(stats: TrajectoryStats, config: RewardConfig, epoch: float = 0.0,
                      step: int = 0) -> dict[str, float]:
    """Every term of one trajectory's reward at ``epoch`` and optimizer ``step``, and their sum (``total``)."""
    state = type("State", (), {"epoch": epoch, "global_step": step})()
    terms = {term.__name__: term([stats.as_dict()], config=config, trainer_state=state)[0] for term in TERMS}
    return terms | {"total": sum(terms.values())}
