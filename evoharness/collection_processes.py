"""One collection played by several processes: each plays every n-th planned episode (``CollectionConfig.shard``)
and writes to the same warehouse file, holding it only around its writes; the parent relays their progress and
merges their results. On a CPU each process is a core: a local student's turns generate in one thread each."""

from __future__ import annotations

import multiprocessing
import os
import queue
from collections.abc import Callable
from concurrent.futures import Future, ProcessPoolExecutor
from dataclasses import replace
from pathlib import Path
from typing import Any

from evoharness.agents.records import EpisodeRecord
from evoharness.collection import CollectionConfig, CollectionResult, collect
from evoharness.teachers.registry import TeacherRegistry
from warehouse import Warehouse

PROCESS_OVERHEAD_BYTES = 1 << 30
"""Memory a playing process needs beyond its copy of the weights (torch, the tokenizer, the decoder's cache)."""


def available_memory() -> int:
    """Bytes of memory a new process can have: the kernel's MemAvailable (free pages and the page cache it can
    reclaim), where /proc/meminfo has it; else the free pages alone."""
    try:
        with open("/proc/meminfo") as meminfo:
            for line in meminfo:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")


def local_processes(model_dir: str | Path, games: int | None, concurrency: int) -> int:
    """How many processes play ``games`` (None: a whole split) with a local model, on the CPU one core each: one per
    core this process may use, as many as fit in half the available memory with a copy of the weights each, and no
    more than have ``concurrency`` games each (a process costs seconds to start). On 2 cores, two processes played
    60 games 1.38× faster than one, every game ending alike (``benchmarks/results/eval_processes.json``)."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    weights = sum(f.stat().st_size for f in Path(model_dir).glob("*.safetensors")) or sum(
        f.stat().st_size for f in Path(model_dir).glob("*.bin"))
    available = available_memory()
    busy = cores if games is None else games // concurrency
    return max(1, min(cores, available // 2 // (weights + PROCESS_OVERHEAD_BYTES), busy))


def collect_in_processes(config: CollectionConfig, db_path: str | Path, run_id: str, processes: int,
                         registry: TeacherRegistry, model_version: str | None = None,
                         on_progress: Callable[[int, int, EpisodeRecord], None] | None = None) -> CollectionResult:
    """:func:`collect` of ``config`` in ``processes`` processes (spawned; the caller's warehouse connection must be
    released); one result, as one process would have returned it. A process's error is raised here."""
    context = multiprocessing.get_context("spawn")
    with context.Manager() as manager:
        events = manager.Queue()
        with ProcessPoolExecutor(processes, mp_context=context) as pool:
            shards = [pool.submit(_collect_shard, replace(config, shard=(i, processes)), str(db_path), run_id,
                                  registry, model_version, events) for i in range(processes)]
            _relay(shards, events, on_progress)
            return merged([shard.result() for shard in shards])


def _relay(shards: list[Future[CollectionResult]], events: Any,
           on_progress: Callable[[int, int, EpisodeRecord], None] | None) -> None:
    """Pass the processes' finished episodes on as one count, until every process has ended."""
    counts: dict[int, tuple[int, int]] = {}
    while True:
        try:
            shard, done, total, record = events.get(timeout=0.5)
        except queue.Empty:
            if all(s.done() for s in shards):
                return
            continue
        counts[shard] = (done, total)
        if on_progress is not None:
            on_progress(sum(d for d, _ in counts.values()), sum(t for _, t in counts.values()), record)


def _collect_shard(config: CollectionConfig, db_path: str, run_id: str, registry: TeacherRegistry,
                   model_version: str | None, events: Any) -> CollectionResult:
    import torch

    assert config.shard is not None
    index, processes = config.shard
    torch.set_num_threads(max(1, (os.cpu_count() or 1) // processes))  # the cores shared out, none oversubscribed
    with Warehouse(db_path) as wh:
        return collect(config, wh, run_id, registry=registry, model_version=model_version,
                       on_progress=lambda done, total, record: events.put((index, done, total, record)))


def merged(results: list[CollectionResult]) -> CollectionResult:
    """The shards' results as one: counts summed, the longest time, the records in shard order, the first stop."""
    stopped = next((r for r in results if r.stop_kind is not None), None)
    spent = [r.spent_usd for r in results if r.spent_usd is not None]
    first = results[0]
    return CollectionResult(
        planned=sum(r.planned for r in results), skipped=sum(r.skipped for r in results),
        written=sum(r.written for r in results), failed=sum(r.failed for r in results),
        won=sum(r.won for r in results), seconds=max(r.seconds for r in results),
        records=[record for r in results for record in r.records],
        concurrency=sum(r.concurrency or 0 for r in results) or None,
        not_started=sum(r.not_started for r in results),
        stop_kind=stopped.stop_kind if stopped else None, stop_reason=stopped.stop_reason if stopped else None,
        spent_usd=sum(spent) if spent else None, preflight=first.preflight, lineage=first.lineage)
