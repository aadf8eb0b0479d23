"""On-policy relabelling (DAgger): a student plays train games and the expert labels the states it reaches.

The student acts (so the states are the ones *it* reaches: its oscillations, its wrong rooms); the offline
expert, which follows the same game through the student's commands, says what it would have played there.
``labels="env"`` (the default) labels every turn where the student acted in the environment with the expert's
next environment command, written as the expert's episodes write it; turns where the student used a
meta-action stay unlabelled. ``labels="turn"`` labels every turn with the scripted expert's whole turn, whose
meta-actions (its own recall/commit/note/track script) are not the ones consolidation writes into the
training data, so they teach the student a second, conflicting harness style (docs/results.md, DAgger). Each step
stores the expert's turn (``steps.label``) and the prompt's template variables
(``steps.turn_vars``), so :mod:`evoharness.curation.relabelled` can add the labelled states to a dataset in
any prompt set. The episodes are ``policy_kind = 'relabel'``: they name the model version that played, and
evaluation views never count them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Literal

from pydantic import BaseModel, Field

from evoharness.agents.records import EpisodeRecord
from evoharness.collection import CollectionConfig, CollectionResult, collect
from evoharness.evaluation.run import EvaluationConfig, student_policy
from evoharness.harness.grammar import ActionKind, parse_turn
from evoharness.harness.prompts import Mode
from evoharness.teachers.base import Policy, PolicyError, PolicyOutput, PolicySession, TurnContext
from evoharness.teachers.expert import ExpertSession, ExpertTeacher, expert_env_turn
from evoharness.teachers.registry import TeacherRegistry
from warehouse import Warehouse

LabelMode = Literal["env", "turn"]
"""What the expert labels: its environment command on the student's environment turns, or its whole turn."""


class RelabelSettings(BaseModel):
    """How a student plays while the expert labels (a recipe's ``relabel`` section). Greedy by default: the
    student's own mistakes."""

    limit: int | None = Field(default=None, ge=1, description="First N train games (None: all).")
    seeds: tuple[int, ...] = Field(default=(0,), description="Episode seeds per game.")
    max_steps: int = Field(default=70, ge=1, description="Step budget per episode.")
    max_tokens: int = Field(default=128, ge=1, description="Completion tokens per turn.")
    temperature: float | None = Field(default=None, description="None: greedy.")
    labels: LabelMode = Field(default="env", description=(
        "env: the expert's environment command on the turns where the student acted in the environment; turn: "
        "the scripted expert's whole turn, meta-actions included, on every turn."))
    concurrency: int = Field(default=16, ge=1, description="Episodes in flight (their turns generate as one batch).")


class RelabelConfig(RelabelSettings):
    """One relabelling run: which student plays where, with :class:`RelabelSettings`."""

    model_version: str
    split: str = Field(default="train", pattern="^train$", description="Labels are training data: train games only.")
    engine: str | None = None
    workers: int | None = None
    data_root: str | None = None


def relabel_policy_name(model_version: str) -> str:
    """The name the relabelling episodes carry (``episodes.teacher``): the version, marked as relabelled."""
    return f"{model_version}.expert-labels"


@dataclass
class ExpertLabelledSession:
    """The student's session acts; the expert's session, asked about the same state, gives the label."""

    student: PolicySession
    expert: ExpertSession
    labels: LabelMode = "env"

    async def act(self, context: TurnContext) -> PolicyOutput:
        output = await self.student.act(context)
        if self.labels == "env":
            plan = context.result.expert_plan
            acted = parse_turn(output.text).kind is ActionKind.ENV
            return replace(output, label=expert_env_turn(plan[0]) if acted and plan else None)
        try:
            label: str | None = (await self.expert.act(context)).text
        except PolicyError:  # the expert has no plan for this state (it gave up): the turn stays unlabelled
            label = None
        return replace(output, label=label)


@dataclass
class ExpertLabelledPolicy:
    """``student`` with the expert's label on every turn; needs the environment's privileged expert plan."""

    student: Policy
    expert: ExpertTeacher
    labels: LabelMode = "env"
    needs_expert: bool = True
    name: str = field(init=False)

    def __post_init__(self) -> None:
        self.name = self.student.name

    def start_episode(self, episode_id: str, objective: str) -> ExpertLabelledSession:
        return ExpertLabelledSession(self.student.start_episode(episode_id, objective),
                                     self.expert.start_episode(episode_id, objective), self.labels)

    async def aclose(self) -> None:
        from evoharness.teachers.clients.base import aclose_client

        await aclose_client(self.student)


def collect_expert_labels(wh: Warehouse, config: RelabelConfig, run_id: str,
                          on_progress: Callable[[int, int, EpisodeRecord], None] | None = None) -> CollectionResult:
    """Play ``config.model_version`` on train games with the expert labelling every turn (resumable)."""
    spec, bank_version = student_policy(wh, EvaluationConfig(
        model_version=config.model_version, max_steps=config.max_steps, max_tokens=config.max_tokens,
        temperature=config.temperature, concurrency=config.concurrency))
    spec = spec.model_copy(update={"name": relabel_policy_name(config.model_version)})
    collection = CollectionConfig(
        teacher=spec.name, mode=spec.mode, split=config.split, limit=config.limit, seeds=config.seeds,
        max_steps=config.max_steps, concurrency=config.concurrency, engine=config.engine, workers=config.workers,
        data_root=config.data_root, bank_version=bank_version if spec.mode is Mode.BPE else None,
    )
    expert = ExpertTeacher(mode=spec.mode)
    return collect(collection, wh, run_id, on_progress=on_progress, registry=TeacherRegistry([spec]),
                   model_version=config.model_version,
                   wrap_policy=lambda student: ExpertLabelledPolicy(student, expert, config.labels))
