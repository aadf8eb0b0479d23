"""Multi-turn rollouts of the model being trained, in the real environment, through the BPE harness.

The model plays exactly as a teacher or an evaluated student does (the same runner, Workspace, Belief,
Experience bank, turn grammar and step budget); its session keeps every turn's prompt and completion
token ids, which become the per-turn training samples of GRPO.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from evoharness.agents.records import EpisodeRecord, EpisodeSpec
from evoharness.agents.runner import RunSettings, run_episodes
from evoharness.envs.alfworld import GameCatalog
from evoharness.envs.pool import EnvPool
from evoharness.harness.prompts import Mode, PromptSet
from evoharness.teachers.base import PolicyOutput, TurnContext
from evoharness.teachers.clients.constrained import ActionConstraint, ActionSpace, RepeatGuard
from evoharness.teachers.clients.hf_batching import BatchGenerator, Engine, Sampling


@dataclass(frozen=True)
class TurnTokens:
    """One turn as the model saw and wrote it (the completion ends with the end-of-turn token if emitted).
    ``choices`` marks the completion tokens that were a choice under constrained decoding (None: unconstrained,
    every token was)."""

    prompt_ids: list[int]
    completion_ids: list[int]
    choices: list[bool] | None = None


@dataclass
class Rollout:
    """A played episode and its turns' tokens (``turns`` and ``record.steps`` correspond one to one); ``guided``:
    it decoded without repeats (:class:`RepeatGuard`)."""

    record: EpisodeRecord
    turns: list[TurnTokens]
    guided: bool = False


@dataclass
class ModelSession:
    """One episode of :class:`ModelPolicy`: generates each turn and keeps its token ids."""

    policy: ModelPolicy
    turns: list[TurnTokens] = field(default_factory=list)
    repeats: RepeatGuard | None = None  # set when the policy avoids repeats

    async def act(self, context: TurnContext) -> PolicyOutput:
        tokenizer = self.policy.generator.tokenizer
        prompt_ids = tokenizer.apply_chat_template(context.prompt.messages(), add_generation_prompt=True,
                                                   tokenize=True, return_dict=True)["input_ids"]
        observation, admissible = context.result.observation, tuple(context.result.admissible_commands)
        commands = admissible if self.repeats is None else self.repeats.commands(admissible, observation)
        constraint = ActionConstraint(tokenizer, ActionSpace(commands, meta=context.mode is Mode.BPE)) \
            if self.policy.constrain_actions else None
        completion_ids = await self.policy.generator.generate(prompt_ids, self.policy.sampling, constraint)
        choices = constraint.choices(completion_ids) \
            if constraint is not None and self.policy.generator.applies_constraints else None
        self.turns.append(TurnTokens(list(prompt_ids), completion_ids, choices))
        text = tokenizer.decode(completion_ids, skip_special_tokens=True)
        if self.repeats is not None:
            self.repeats.record(text, observation, admissible)
        return PolicyOutput(text, input_tokens=len(prompt_ids), output_tokens=len(completion_ids))


@dataclass
class ModelPolicy:
    """The policy interface around the model being trained; concurrent episodes' turns generate in batches."""

    generator: BatchGenerator
    sampling: Sampling
    constrain_actions: bool = True
    guided: frozenset[str] = frozenset()  # episodes whose decoding leaves out commands issued in the same state
    name: str = "grpo-rollout"
    needs_expert: bool = False
    sessions: dict[str, ModelSession] = field(default_factory=dict)

    def start_episode(self, episode_id: str, objective: str) -> ModelSession:
        session = ModelSession(self, repeats=RepeatGuard() if episode_id in self.guided else None)
        self.sessions[episode_id] = session
        return session


class RolloutEngine:
    """Plays groups of episodes of the model on named games (fast engine in-process by default). ``guided(position,
    step)`` says which episodes of a step (by their position in its global batch) decode without repeats (none by
    default).
    ``generation`` is the local generator's engine (:class:`BatchGenerator`): ``continuous`` by default, ``batch``
    for the path before (``benchmarks/student_speed.py`` compares them); ``compute_dtype`` the precision it decodes
    in (None: the weights as stored)."""

    generation: Engine = "continuous"

    def __init__(self, prompt_set: PromptSet, settings: RunSettings, sampling: Sampling, max_batch: int = 16,
                 data_root: str | None = None, engine: str | None = None,
                 vllm_server_url: str | None = None, guided: Callable[[int, int], bool] | None = None,
                 compute_dtype: str | None = None) -> None:
        self.prompt_set, self.settings, self.sampling, self.max_batch = prompt_set, settings, sampling, max_batch
        self.compute_dtype = compute_dtype
        self.vllm_server_url, self.guided = vllm_server_url, guided or (lambda position, step: False)
        self.catalog = GameCatalog(data_root)
        self.pool = EnvPool(workers=0 if engine in (None, "fast") else None, engine=engine)
        self.bank_label = f"{settings.bank.bank_id}@v{settings.bank.version}"

    def play(self, game_ids: list[str], model: Any, tokenizer: Any, round_id: int,
             positions: Sequence[int] | None = None) -> list[Rollout]:
        """One episode per entry of ``game_ids`` (repeats of a game are a GRPO group, told apart by seed), at the
        given ``positions`` of the step's global batch (default 0, 1, …; other processes play the others): seeds
        follow the global position, so the episodes do not depend on the number of processes."""
        positions = list(range(len(game_ids))) if positions is None else list(positions)
        specs = [
            EpisodeSpec(teacher=f"{ModelPolicy.name}-{round_id}", game=self.catalog.get(game_id), mode=Mode.BPE,
                        seed=position, max_steps=self.settings.budget.max_steps, prompt_id=self.prompt_set.prompt_id,
                        prompt_sha=self.prompt_set.sha256, bank=self.bank_label)
            for position, game_id in zip(positions, game_ids, strict=True)
        ]
        guided = frozenset(spec.episode_id for spec in specs if self.guided(spec.seed, round_id))
        policy = ModelPolicy(self._generator(model, tokenizer), self.sampling, guided=guided)
        was_training = model.training
        model.eval()
        try:
            records = asyncio.run(run_episodes(specs, policy, self.pool, self.prompt_set, self.settings))
        finally:
            model.train(was_training)
        return [Rollout(record, policy.sessions[record.spec.episode_id].turns
                        if record.spec.episode_id in policy.sessions else [], record.spec.episode_id in guided)
                for record in records]

    def _generator(self, model: Any, tokenizer: Any) -> BatchGenerator:
        if self.vllm_server_url is None:
            return BatchGenerator(model, tokenizer, max_batch=self.max_batch, engine=self.generation,
                                  compute_dtype=self.compute_dtype)
        from evoharness.training.vllm_generation import VLLMServerGenerator

        return VLLMServerGenerator(model, tokenizer, max_batch=self.max_batch, base_url=self.vllm_server_url)

    def close(self) -> None:
        self.pool.close()
