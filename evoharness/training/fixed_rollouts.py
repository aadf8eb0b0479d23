"""Fixed rollouts: episodes recorded once and replayed to GRPO, whatever the model and the number of processes.

GRPO's update depends on the model only through its rollouts; replaying the same recorded episodes makes two
trainings comparable exactly (one process against two, a killed run against its resume, sample counting). The
episodes are real: the ALFWorld expert plays the games in the real (fast) engine through the BPE harness, with
a different step budget for each member of a group so that the group's rewards differ; each turn becomes a
:class:`TurnTokens` of the student's tokenizer (prompt truncated from the left, the answer plus end-of-turn).
"""

from __future__ import annotations

import asyncio
import pickle
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from evoharness.agents.records import EpisodeSpec
from evoharness.agents.runner import RunSettings, run_episodes
from evoharness.envs.alfworld import GameCatalog
from evoharness.envs.pool import EnvPool
from evoharness.harness.budget import StepBudget
from evoharness.harness.prompts import Mode, load_prompt_set
from evoharness.teachers.expert import ExpertTeacher
from evoharness.training.rollout import Rollout, TurnTokens


@dataclass
class FixedRollouts:
    """Replays ``episodes[(game_id, member)]``: the ``member``-th episode of a game's group (global position
    modulo the group size), so the same episode comes back in every round, process and run."""

    episodes: dict[tuple[str, int], Rollout]
    group: int

    def play(self, game_ids: list[str], model: Any, tokenizer: Any, round_id: int,
             positions: Sequence[int] | None = None) -> list[Rollout]:
        positions = range(len(game_ids)) if positions is None else positions
        keys = [(g, p % self.group) for g, p in zip(game_ids, positions, strict=True)]
        missing = [key for key in keys if key not in self.episodes]
        if missing:
            raise KeyError(f"no recorded episode for {missing[:3]} (recorded: {len(self.episodes)} episodes)")
        return [self.episodes[key] for key in keys]

    def close(self) -> None:
        return None

    def save(self, path: str | Path) -> None:
        Path(path).write_bytes(pickle.dumps({"episodes": self.episodes, "group": self.group}))

    @classmethod
    def load(cls, path: str | Path) -> FixedRollouts:
        data = pickle.loads(Path(path).read_bytes())  # our own file, written by save()
        return cls(data["episodes"], data["group"])

    @property
    def turns(self) -> int:
        return sum(len(r.turns) for r in self.episodes.values())


def record_expert_rollouts(game_ids: Sequence[str], tokenizer: Any, group: int, budgets: Sequence[int],
                           data_root: str | None = None, prompt_tokens: int = 96,
                           completion_tokens: int = 32, prompt_set: str = "alfworld/bpe") -> FixedRollouts:
    """The expert plays every game ``group`` times (member j with step budget ``budgets[j % len(budgets)]``), its
    turns rendered with ``prompt_set`` (a student's set gives the student's prompt lengths)."""
    catalog = GameCatalog(data_root)
    prompts = load_prompt_set(prompt_set)
    pool = EnvPool(workers=0, engine="fast", expert=True)
    episodes: dict[tuple[str, int], Rollout] = {}
    try:
        for member in range(group):
            budget = budgets[member % len(budgets)]
            settings = RunSettings(budget=StepBudget(max_steps=budget), concurrency=8)
            specs = [EpisodeSpec(teacher="fixed", game=catalog.get(g), mode=Mode.BPE, seed=member, max_steps=budget,
                                 prompt_id=prompts.prompt_id, prompt_sha=prompts.sha256) for g in game_ids]
            records = asyncio.run(run_episodes(specs, ExpertTeacher(mode=Mode.BPE), pool, prompts, settings))
            for game_id, record in zip(game_ids, records, strict=True):
                if record.status != "finished":
                    raise RuntimeError(f"expert episode on {game_id} failed: {record.failure_reason}")
                turns = [_turn(step.prompt, step.raw_output, tokenizer, prompt_tokens, completion_tokens)
                         for step in record.steps]
                episodes[(game_id, member)] = Rollout(replace(record), turns)
    finally:
        pool.close()
    return FixedRollouts(episodes, group)


def _turn(prompt: str, answer: str, tokenizer: Any, prompt_tokens: int, completion_tokens: int) -> TurnTokens:
    prompt_ids = tokenizer(prompt, add_special_tokens=False)["input_ids"][-prompt_tokens:]
    completion = tokenizer(answer, add_special_tokens=False)["input_ids"][:completion_tokens - 1]
    return TurnTokens(list(prompt_ids), list(completion) + [tokenizer.eos_token_id])
