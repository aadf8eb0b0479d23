"""Teacher collection: play a teacher on a split's games and write every episode to the warehouse.

Shared by the CLI and the Dagster ``teacher_episodes`` asset. Episodes already finished in the warehouse
are skipped (the episode key covers teacher, game, seed, prompt sha, mode and budget), so reruns resume.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from evoharness.agents.records import EpisodeRecord, EpisodeSpec
from evoharness.agents.runner import RunSettings, run_episodes
from evoharness.envs.alfworld import GameCatalog
from evoharness.envs.pool import EnvPool
from evoharness.harness.budget import StepBudget
from evoharness.harness.prompts import Mode, load_prompt_set
from evoharness.lineage import code_version
from evoharness.teachers.factory import build_policy
from warehouse import Warehouse


@dataclass(frozen=True)
class CollectionConfig:
    """What to collect. ``limit`` takes the first N games of the split in catalog order."""

    teacher: str = "expert"
    mode: Mode = Mode.BPE
    split: str = "valid_seen"
    limit: int | None = None
    seeds: tuple[int, ...] = (0,)
    max_steps: int = 70
    meta_action_cost: int = 1
    workers: int = 2
    concurrency: int = 8
    engine: str | None = None
    data_root: str | None = None


@dataclass
class CollectionResult:
    planned: int
    skipped: int
    written: int
    failed: int
    won: int
    seconds: float
    records: list[EpisodeRecord] = field(default_factory=list)

    @property
    def episodes_per_second(self) -> float | None:
        ran = len(self.records)
        return ran / self.seconds if ran and self.seconds > 0 else None


def plan_episodes(config: CollectionConfig) -> list[EpisodeSpec]:
    catalog = GameCatalog(config.data_root)
    prompt_set = load_prompt_set(f"alfworld/{config.mode.value}")
    return [
        EpisodeSpec(
            teacher=config.teacher, game=game, mode=config.mode, seed=seed, max_steps=config.max_steps,
            prompt_id=prompt_set.prompt_id, prompt_sha=prompt_set.sha256,
        )
        for game in catalog.games(config.split, config.limit)
        for seed in config.seeds
    ]


def collect(
    config: CollectionConfig,
    warehouse: Warehouse,
    run_id: str,
    on_progress: Callable[[int, int, EpisodeRecord], None] | None = None,
) -> CollectionResult:
    """Run the episodes of ``config`` not yet finished in ``warehouse``; write each as it completes."""
    specs = plan_episodes(config)
    warehouse.upsert_games(spec.game.as_row() for spec in {s.game.game_id: s for s in specs}.values())
    done = warehouse.finished_episode_ids(config.teacher)
    todo = [spec for spec in specs if spec.episode_id not in done]
    policy = build_policy(config.teacher, config.mode)
    prompt_set = load_prompt_set(f"alfworld/{config.mode.value}")
    settings = RunSettings(
        budget=StepBudget(max_steps=config.max_steps, meta_action_cost=config.meta_action_cost),
        concurrency=config.concurrency,
    )
    version = code_version()
    counts = {"written": 0, "finished": 0}

    def write(record: EpisodeRecord) -> None:
        counts["written"] += warehouse.write_episode(record, run_id=run_id, code_version=version)
        counts["finished"] += 1
        if on_progress is not None:
            on_progress(counts["finished"], len(todo), record)

    started = time.perf_counter()
    records: list[EpisodeRecord] = []
    if todo:
        workers = min(config.workers, len(todo))
        with EnvPool(workers=workers, engine=config.engine, expert=policy.needs_expert) as pool:
            records = asyncio.run(run_episodes(todo, policy, pool, prompt_set, settings, on_episode=write))
    return CollectionResult(
        planned=len(specs),
        skipped=len(specs) - len(todo),
        written=counts["written"],
        failed=sum(r.status == "failed" for r in records),
        won=sum(r.won for r in records),
        seconds=time.perf_counter() - started,
        records=records,
    )
