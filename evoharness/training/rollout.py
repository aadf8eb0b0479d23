"""Multi-turn rollouts of the model being trained, in the real environment, through the BPE harness.

The model plays exactly as a teacher or an evaluated student does (the same runner, Workspace, Belief,
Experience bank, turn grammar and step budget); its session keeps every turn's prompt and completion
token ids, which become the per-turn training samples of GRPO.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

from evoharness.agents.records import EpisodeRecord, EpisodeSpec
from evoharness.agents.runner import RunSettings, run_episodes
from evoharness.envs.alfworld import GameCatalog
from evoharness.envs.pool import EnvPool
from evoharness.harness.prompts import Mode, PromptSet
from evoharness.teachers.base import PolicyOutput, TurnContext


@dataclass(frozen=True)
class TurnTokens:
    """One turn as the model saw and wrote it (the completion ends with the end-of-turn token if emitted)."""

    prompt_ids: list[int]
    completion_ids: list[int]


@dataclass
class Rollout:
    """A played episode and its turns' tokens (``turns`` and ``record.steps`` correspond one to one)."""

    record: EpisodeRecord
    turns: list[TurnTokens]


@dataclass
class GenerationSettings:
    max_new_tokens: int = 512
    temperature: float = 1.0
    top_p: float = 1.0


@dataclass
class ModelSession:
    """One episode of :class:`ModelPolicy`: generates each turn and keeps its token ids."""

    policy: ModelPolicy
    turns: list[TurnTokens] = field(default_factory=list)

    async def act(self, context: TurnContext) -> PolicyOutput:
        prompt_ids, completion_ids, text = self.policy.generate(context.prompt.messages())
        self.turns.append(TurnTokens(prompt_ids, completion_ids))
        return PolicyOutput(text, input_tokens=len(prompt_ids), output_tokens=len(completion_ids))


@dataclass
class ModelPolicy:
    """The policy interface around an in-memory causal LM (the model being trained)."""

    model: Any
    tokenizer: Any
    generation: GenerationSettings
    name: str = "grpo-rollout"
    needs_expert: bool = False
    sessions: dict[str, ModelSession] = field(default_factory=dict)

    def start_episode(self, episode_id: str, objective: str) -> ModelSession:
        session = ModelSession(self)
        self.sessions[episode_id] = session
        return session

    def generate(self, messages: list[dict[str, str]]) -> tuple[list[int], list[int], str]:
        """Sample one turn; returns (prompt ids, completion ids up to and including end-of-turn, text)."""
        import torch

        prompt_ids = self.tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True,
                                                        return_dict=True)["input_ids"]
        inputs = torch.tensor([prompt_ids], device=self.model.device)
        eos = self.tokenizer.eos_token_id
        with torch.no_grad():
            out = self.model.generate(
                input_ids=inputs, attention_mask=torch.ones_like(inputs), do_sample=True,
                temperature=self.generation.temperature, top_p=self.generation.top_p, top_k=None,
                max_new_tokens=self.generation.max_new_tokens, eos_token_id=eos,
                pad_token_id=self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else eos,
            )
        completion = out[0, len(prompt_ids):].tolist()
        if eos in completion:
            completion = completion[:completion.index(eos) + 1]
        return list(prompt_ids), completion, self.tokenizer.decode(completion, skip_special_tokens=True)


class RolloutEngine:
    """Plays groups of episodes of the model on named games (fast engine in-process by default)."""

    def __init__(self, prompt_set: PromptSet, settings: RunSettings, generation: GenerationSettings,
                 data_root: str | None = None, engine: str | None = None) -> None:
        self.prompt_set, self.settings, self.generation = prompt_set, settings, generation
        self.catalog = GameCatalog(data_root)
        self.pool = EnvPool(workers=0 if engine in (None, "fast") else None, engine=engine)
        self.bank_label = f"{settings.bank.bank_id}@v{settings.bank.version}"

    def play(self, game_ids: list[str], model: Any, tokenizer: Any, round_id: int) -> list[Rollout]:
        """One episode per entry of ``game_ids`` (repeats of a game are a GRPO group, told apart by seed)."""
        policy = ModelPolicy(model, tokenizer, self.generation)
        specs = [
            EpisodeSpec(teacher=f"{policy.name}-{round_id}", game=self.catalog.get(game_id), mode=Mode.BPE,
                        seed=index, max_steps=self.settings.budget.max_steps, prompt_id=self.prompt_set.prompt_id,
                        prompt_sha=self.prompt_set.sha256, bank=self.bank_label)
            for index, game_id in enumerate(game_ids)
        ]
        was_training = model.training
        model.eval()
        try:
            records = asyncio.run(run_episodes(specs, policy, self.pool, self.prompt_set, self.settings))
        finally:
            model.train(was_training)
        return [Rollout(record, policy.sessions[record.spec.episode_id].turns
                        if record.spec.episode_id in policy.sessions else [])
                for record in records]

    def close(self) -> None:
        self.pool.close()
