"""Replay an episode's environment commands on the engine (deterministic given the commands).

The replay yields what the stored log lacks: admissible commands and objective at every step, and the
engine's ground-truth facts at the same step for the audit. A replay whose observations differ from the
stored ones fails the episode (the log and the engine disagree; nothing would be trustworthy).
"""

from __future__ import annotations

from dataclasses import dataclass

from evoharness.consolidation.source import SourceEpisode
from evoharness.envs.alfworld.catalog import GameCatalog
from evoharness.envs.base import StepResult, WorldFacts
from evoharness.envs.pool import EnvPool


class ReplayError(RuntimeError):
    """The engine's replay does not reproduce the stored episode."""


@dataclass(frozen=True)
class ReplayedStep:
    command: str
    think: str
    source_t: int
    result: StepResult
    facts: WorldFacts


@dataclass(frozen=True)
class Replay:
    """The first result and facts, then one entry per environment command."""

    first: StepResult
    first_facts: WorldFacts
    steps: tuple[ReplayedStep, ...]


def _same(a: str, b: str) -> bool:
    return " ".join(a.split()) == " ".join(b.split())


async def replay_episode(episode: SourceEpisode, pool: EnvPool, catalog: GameCatalog) -> Replay:
    """Replay ``episode`` in ``pool``; raises :class:`ReplayError` on the first divergence."""
    env, first = await pool.open(catalog.get(episode.game_id), episode.seed)
    try:
        first_facts = await env.facts()
        steps: list[ReplayedStep] = []
        for source in episode.env_steps():
            result = await env.step(source.action)
            if not _same(result.observation, source.observation):
                raise ReplayError(
                    f"replay diverged at t={source.t} ({source.action!r}): engine said "
                    f"{result.observation[:80]!r}, log says {source.observation[:80]!r}"
                )
            steps.append(ReplayedStep(source.action, source.think, source.t, result, await env.facts()))
            if result.done:
                break
    finally:
        await env.release()
    return Replay(first=first, first_facts=first_facts, steps=tuple(steps))
