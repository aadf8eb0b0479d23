"""Teacher collection: play a teacher on a split's games and write every episode to the warehouse.

Shared by the CLI and the Dagster ``teacher_episodes`` asset. Episodes already finished in the warehouse
are skipped (the episode key covers teacher, game, seed, prompt sha, mode and budget), so reruns resume.
The teacher comes from the registry (``teachers.yaml``): its prompt template, its concurrency bound, and
its entry, mirrored into the warehouse ``teachers`` table.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from typing import Self

from evoharness.agents.records import EpisodeRecord, EpisodeSpec
from evoharness.agents.rows import PolicyKind, episode_row, step_rows
from evoharness.agents.runner import RunSettings, run_episodes
from evoharness.consolidation.bank import load_bank
from evoharness.envs.alfworld import SEED_BANK, GameCatalog
from evoharness.envs.pool import EnvPool
from evoharness.harness.budget import StepBudget
from evoharness.harness.experience import ExperienceBankData, load_bank_file
from evoharness.harness.prompts import Mode, PromptSet, load_prompt_set
from evoharness.lineage import code_version
from evoharness.run_guard import GuardedPolicy, RunGuard, SpendCap, StopKind
from evoharness.teachers.base import Policy
from evoharness.teachers.clients.base import aclose_client
from evoharness.teachers.factory import build_policy
from evoharness.teachers.preflight import PreflightError, PreflightResult, check, needs_preflight
from evoharness.teachers.registry import Provider, TeacherRegistry, TeacherSpec, reconcile_warehouse
from warehouse import Warehouse, load_query


@dataclass(frozen=True)
class CollectionConfig:
    """What to collect. ``limit`` takes the first N games of the split in catalog order."""

    teacher: str = "expert"
    mode: Mode = Mode.BPE
    split: str = "train"
    limit: int | None = None
    seeds: tuple[int, ...] = (0,)
    max_steps: int = 70
    meta_action_cost: int = 1
    workers: int | None = None  # environment worker processes; None: by engine (fast: in-process)
    concurrency: int | None = None  # episodes in flight; None: the teacher's max_concurrency, which also caps it
    engine: str | None = None
    data_root: str | None = None
    teachers_file: str | None = None  # the registry; None: $EVOHARNESS_TEACHERS or ./teachers.yaml
    bank_version: int | None = None  # bpe mode: a frozen version of the seed bank's lineage; None: the seed
    max_spend_usd: float | None = None  # this run's cap (the teacher's registry cap applies as well)
    max_consecutive_failures: int = 5  # calls in a row unreachable / key rejected / model missing: stop the run
    preflight: bool = True  # one real call before fanning out (API teachers)
    shard: tuple[int, int] | None = None  # (i, n): every n-th planned episode from the i-th (one of n processes)

    def __post_init__(self) -> None:
        check_collection_config(self)


class CollectionConfigError(ValueError):
    """A collection setting is out of range; the message names the setting and the fix."""


def check_collection_config(config: CollectionConfig) -> None:
    """Reject settings that would hang or silently do something else, naming the setting and the fix."""
    at_least_one = {"limit": config.limit, "max_steps": config.max_steps, "concurrency": config.concurrency,
                    "max_consecutive_failures": config.max_consecutive_failures}
    for name, value in at_least_one.items():
        if value is not None and value < 1:
            raise CollectionConfigError(f"{name} must be at least 1 (got {value}); set {name} to 1 or more"
                                        + (" or leave it unset for every game" if name == "limit" else ""))
    non_negative: dict[str, float | None] = {"workers": config.workers, "meta_action_cost": config.meta_action_cost,
                                             "max_spend_usd": config.max_spend_usd}
    for name, amount in non_negative.items():
        if amount is not None and amount < 0:
            raise CollectionConfigError(f"{name} must not be negative (got {amount}); set it to 0 or more")
    if not config.seeds:
        raise CollectionConfigError("seeds is empty; give at least one seed (e.g. 0)")
    if config.shard is not None and not 0 <= config.shard[0] < config.shard[1]:
        raise CollectionConfigError(f"shard {config.shard} is not (i, n) with 0 <= i < n")
    if config.engine is not None and config.engine not in ("fast", "textworld"):
        raise CollectionConfigError(f"engine {config.engine!r} is unknown; use fast or textworld")


@dataclass
class CollectionResult:
    planned: int
    skipped: int
    written: int
    failed: int
    won: int
    seconds: float
    records: list[EpisodeRecord] = field(default_factory=list)
    concurrency: int | None = None  # episodes that were allowed in flight
    not_started: int = 0  # planned episodes left unplayed because the run was stopped
    stop_kind: StopKind | None = None
    stop_reason: str | None = None  # why the run stopped early (spend cap, circuit breaker)
    spent_usd: float | None = None  # this run, preflight included (None: the teacher has no prices)
    preflight: PreflightResult | None = None
    lineage: dict[str, str | None] = field(default_factory=dict)  # who played, prompt, bank, code version

    @property
    def episodes_per_second(self) -> float | None:
        ran = len(self.records)
        return ran / self.seconds if ran and self.seconds > 0 else None


def prompt_id_for(config: CollectionConfig, registry: TeacherRegistry | None = None) -> str:
    """The teacher's prompt template for ``config.mode`` (``alfworld/<mode>`` for unregistered names)."""
    registry = registry or TeacherRegistry.load(config.teachers_file)
    if config.teacher in registry:
        return registry.get(config.teacher).prompt_id(config.mode)
    return f"alfworld/{config.mode.value}"


def episode_bank(config: CollectionConfig, warehouse: Warehouse) -> ExperienceBankData:
    """The frozen Experience bank the episodes recall from: the seed file, or a version from the warehouse."""
    seed = load_bank_file(SEED_BANK)
    if config.bank_version is None or config.bank_version == seed.version:
        return seed
    return load_bank(warehouse, seed.bank_id, config.bank_version)


def bank_label(bank: ExperienceBankData) -> str:
    return f"{bank.bank_id}@v{bank.version}"


def plan_episodes(config: CollectionConfig, bank: ExperienceBankData | None = None) -> list[EpisodeSpec]:
    """One spec per game and seed; in bpe mode the bank version is part of each episode's key."""
    catalog = GameCatalog(config.data_root)
    prompt_set = load_prompt_set(prompt_id_for(config))
    label = bank_label(bank or load_bank_file(SEED_BANK)) if config.mode is Mode.BPE else ""
    return [
        EpisodeSpec(
            teacher=config.teacher, game=game, mode=config.mode, seed=seed, max_steps=config.max_steps,
            prompt_id=prompt_set.prompt_id, prompt_sha=prompt_set.sha256, bank=label,
        )
        for game in catalog.games(config.split, config.limit)
        for seed in config.seeds
    ]


async def _run_and_close(
    todo: list[EpisodeSpec], policy: Policy, pool: EnvPool, prompt_set: PromptSet, settings: RunSettings,
    write: Callable[[EpisodeRecord], Awaitable[None]], guard: RunGuard, preflight: TeacherSpec | None = None,
    preflight_done: Callable[[PreflightResult], None] | None = None,
) -> list[EpisodeRecord]:
    """Preflight (when ``preflight`` names the teacher), run the episodes under ``guard``, then close the
    policy's connections on the same event loop."""
    try:
        if preflight is not None:
            result = await check(policy, preflight, todo[0].mode)
            guard.add_cost(result.cost_usd)
            if preflight_done is not None:
                preflight_done(result)
            if not result.ok:
                raise PreflightError(result.message)
        return await run_episodes(todo, GuardedPolicy(policy, guard), pool, prompt_set, settings, on_episode=write,
                                  may_start=guard.may_start)
    finally:
        await aclose_client(policy)


def spend_caps(teacher: TeacherSpec, config: CollectionConfig, warehouse: Warehouse) -> tuple[SpendCap, ...]:
    """The teacher's registry cap (on its whole attempt ledger) and this run's cap, where set."""
    if teacher.max_spend_usd is None and config.max_spend_usd is None:
        return ()
    if teacher.provider is not Provider.EXPERT and (teacher.price_in is None or teacher.price_out is None):
        raise CollectionConfigError(
            f"teacher {teacher.name!r} has a spend cap but no prices, so its spend cannot be counted; register "
            f"them with `evoharness teacher add {teacher.name} ... --price-in USD --price-out USD`")
    caps = []
    if teacher.max_spend_usd is not None:
        spent = float(warehouse.scalar(load_query("teacher_spend"), {"teacher": teacher.name}))
        caps.append(SpendCap(teacher.max_spend_usd, f"teacher {teacher.name!r} max_spend_usd", spent))
    if config.max_spend_usd is not None:
        caps.append(SpendCap(config.max_spend_usd, "this run's --max-spend-usd"))
    return tuple(caps)


class EpisodeWriter:
    """Stores episodes on one writer thread, in order of completion, never blocking the event loop.

    The warehouse file is held while writes are queued and released as soon as the queue drains, so other
    processes (a consolidation, an audit) get the file between bursts without paying a reconnect (and a
    DuckDB checkpoint) per episode. A queue that never drains (a fast teacher) gives the file up after
    :data:`MAX_HOLD_S` for :data:`YIELD_S`, longer than a waiting process polls, so that it gets its turn.
    """

    MAX_HOLD_S = 2.0
    YIELD_S = 0.6  # > the 0.5 s a waiting Warehouse polls at

    def __init__(self, warehouse: Warehouse, run_id: str, code_version: str, model_version: str | None = None,
                 policy_kind: PolicyKind = "teacher") -> None:
        self.warehouse, self.run_id, self.code_version = warehouse, run_id, code_version
        self.model_version, self.policy_kind = model_version, policy_kind
        self._thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="warehouse-writer")
        self._queued = 0
        self._lock = threading.Lock()
        self._held_since: float | None = None

    async def write(self, record: EpisodeRecord) -> bool:
        """Store ``record``; False when a finished episode with its key was already stored."""
        with self._lock:
            self._queued += 1
        return await asyncio.get_running_loop().run_in_executor(self._thread, self._store, record)

    def _store(self, record: EpisodeRecord) -> bool:
        try:
            row = episode_row(record, self.run_id, self.code_version, self.policy_kind, self.model_version)
            return self.warehouse.write_episode(row, step_rows(record))
        finally:
            with self._lock:
                self._queued -= 1
                drained = self._queued == 0
            self._held_since = self._held_since or time.monotonic()  # connected by this write (or held before)
            held_too_long = time.monotonic() - self._held_since > self.MAX_HOLD_S
            if drained or held_too_long:
                self.warehouse.release()
                self._held_since = None
            if held_too_long and not drained:
                time.sleep(self.YIELD_S)

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self._thread.shutdown(wait=True)


def collect(
    config: CollectionConfig,
    warehouse: Warehouse,
    run_id: str,
    on_progress: Callable[[int, int, EpisodeRecord], None] | None = None,
    registry: TeacherRegistry | None = None,
    model_version: str | None = None,
    wrap_policy: Callable[[Policy], Policy] | None = None,
) -> CollectionResult:
    """Run the episodes of ``config`` not yet finished in ``warehouse``; write each as it completes.

    ``registry`` defaults to the teacher registry file, which the warehouse ``teachers`` table is reconciled
    with. Evaluation passes a registry holding a student and its ``model_version``: the episodes are then
    student episodes naming that version, and the ``teachers`` table is left alone (students are not teachers).
    ``wrap_policy`` (relabelling) wraps the student so that the expert labels its turns: its episodes are
    ``relabel`` episodes, never counted as evaluation.
    """
    if registry is None:
        registry = TeacherRegistry.load(config.teachers_file)
        reconcile_warehouse(warehouse, registry)
    elif model_version is None:
        reconcile_warehouse(warehouse, registry, prune=False)
    teacher = registry.get(config.teacher)
    policy = build_policy(config.teacher, config.mode, registry)  # fails fast on a missing key
    if wrap_policy is not None:
        if model_version is None:
            raise ValueError("only a student (a model version) is relabelled")
        policy = wrap_policy(policy)
    policy_kind: PolicyKind = "teacher" if model_version is None else "student" if wrap_policy is None else "relabel"
    if config.bank_version is None and teacher.bank_version is not None:
        config = replace(config, bank_version=teacher.bank_version)  # the teacher's own bank, unless told otherwise
    bank = episode_bank(config, warehouse)
    specs = plan_episodes(config, bank)
    if config.shard is not None:
        specs = specs[config.shard[0]::config.shard[1]]
    warehouse.upsert_games(spec.game.as_row() for spec in {s.game.game_id: s for s in specs}.values())
    done = warehouse.finished_episode_ids(config.teacher)
    guard = RunGuard(spend_caps(teacher, config, warehouse), config.max_consecutive_failures)
    warehouse.release()  # hold the file only while writing, so other processes can use it meanwhile
    todo = [spec for spec in specs if spec.episode_id not in done]
    prompt_set = load_prompt_set(prompt_id_for(config, registry))
    concurrency = teacher.max_concurrency if config.concurrency is None else min(
        config.concurrency, teacher.max_concurrency)
    settings = RunSettings(
        budget=StepBudget(max_steps=config.max_steps, meta_action_cost=config.meta_action_cost),
        concurrency=concurrency, bank=bank,
    )
    checked: list[PreflightResult] = []
    counts = {"written": 0, "finished": 0}
    writer = EpisodeWriter(warehouse, run_id, code_version(), model_version, policy_kind)

    async def write(record: EpisodeRecord) -> None:
        stored = await writer.write(record)
        counts["written"] += stored
        counts["finished"] += 1
        if on_progress is not None:
            on_progress(counts["finished"], len(todo), record)

    started = time.perf_counter()
    records: list[EpisodeRecord] = []
    if todo and guard.may_start():
        workers = None if config.workers is None else min(config.workers, len(todo))
        preflight = teacher if config.preflight and needs_preflight(teacher) else None
        with writer, EnvPool(workers=workers, engine=config.engine, expert=policy.needs_expert) as pool:
            records = asyncio.run(_run_and_close(todo, policy, pool, prompt_set, settings, write, guard, preflight,
                                                 checked.append))
    priced = teacher.provider is Provider.EXPERT or None not in (teacher.price_in, teacher.price_out)
    return CollectionResult(
        planned=len(specs),
        skipped=len(specs) - len(todo),
        written=counts["written"],
        failed=sum(r.status == "failed" for r in records),
        won=sum(r.won for r in records),
        seconds=time.perf_counter() - started,
        records=records,
        concurrency=concurrency,
        not_started=len(todo) - len(records),
        stop_kind=guard.stop_kind,
        stop_reason=guard.stop_reason,
        spent_usd=guard.spent_usd if priced else None,
        preflight=checked[0] if checked else None,
        lineage={"teacher": config.teacher, "policy_kind": policy_kind,
                 "model_version": model_version, "provider": teacher.provider.value, "model": teacher.model,
                 "prompt_id": prompt_set.prompt_id, "prompt_sha": prompt_set.sha256,
                 "bank": bank_label(bank) if config.mode is Mode.BPE else None, "code_version": code_version()},
    )
