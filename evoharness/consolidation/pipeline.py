"""Asynchronous consolidation of one teacher's stored episodes, in batches, with bounded concurrency.

Per batch: replay every episode on the engine and ask the consolidator for an annotation (at most
``concurrency`` episodes in flight), build the examples with the batch's frozen bank, induce the next bank
version from the batch's train episodes, then write the batch's rows and that version in one short
transaction. The warehouse is opened only around reads and writes, so other processes can write in between.

Resume rule: a run killed anywhere and rerun ends with the same examples and the same Experience bank
versions (same sha256) as an uninterrupted run. Two things make the bank independent of where a run stopped:

- batch boundaries are fixed by episode order: the planned episodes (the first ``limit`` in game order, done or
  not) are cut into batches of ``batch_size`` *before* the consolidated ones are left out
  (:func:`~evoharness.consolidation.batches.pending_batches`), so a rerun meets the same batches;
- a batch commits atomically: its examples and the bank version it induced are written in one transaction,
  so a kill leaves each batch either wholly done (rows and version) or not begun, never rows without the
  version they should have induced. The next batch's bank is then the latest frozen version, as it would have
  been without the kill.

Fixed boundaries were chosen over checkpointing the in-progress bank: the bank already is versioned data in the
warehouse, so a committed batch *is* the checkpoint, and nothing else needs to be stored or cleaned up.
Episodes that failed are redone by the next run with the then-latest bank (a new attempt, not a resume). A pinned
``bank_version`` is where a run starts; the guarantee above is for the default (the latest version).
"""

from __future__ import annotations

import asyncio
import hashlib
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from evoharness.consolidation import bank as banks
from evoharness.consolidation.bank_editor import EditorResult
from evoharness.consolidation.batches import pending_batches
from evoharness.consolidation.config import ConsolidationConfig
from evoharness.consolidation.evolution import Edit, EpisodeEvidence, evolve, lessons_of
from evoharness.consolidation.examples import EpisodeExamples, build_examples
from evoharness.consolidation.plan import Annotation, Consolidator, TaskInfo
from evoharness.consolidation.replay import ReplayError, replay_episode
from evoharness.consolidation.source import SourceEpisode, load_source_episodes, source_rows
from evoharness.consolidation.store import EpisodeRows, consolidated_ids, insert_rows, replace_episodes_rows
from evoharness.envs.alfworld.catalog import GameCatalog
from evoharness.envs.pool import EnvPool, EnvWorkerError
from evoharness.harness.budget import StepBudget
from evoharness.harness.experience import Category, ExperienceBankData
from evoharness.harness.prompts import load_prompt_set
from evoharness.lineage import code_version
from warehouse import Warehouse


@dataclass
class EpisodeOutcome:
    episode: SourceEpisode
    annotation: Annotation
    built: EpisodeExamples | None
    failure: str | None
    n_env_steps: int = 0
    action_sig: str | None = None
    objective: str = ""


@dataclass
class ConsolidationResult:
    consolidation_run_id: str
    planned: int
    consolidated: int
    failed: int
    bank_versions: list[int] = field(default_factory=list)
    seconds: float = 0.0
    input_tokens: int | None = None
    output_tokens: int | None = None
    cost_usd: float | None = None
    editor_calls: list[EditorResult] = field(default_factory=list)


def _sum(values: list[Any]) -> Any:
    known = [v for v in values if v is not None]
    return sum(known) if known else None


async def _consolidate_one(
    episode: SourceEpisode, consolidator: Consolidator, pool: EnvPool, catalog: GameCatalog,
    bank: ExperienceBankData, config: ConsolidationConfig, run_id: str,
) -> EpisodeOutcome:
    try:
        replay = await replay_episode(episode, pool, catalog)
    except (ReplayError, EnvWorkerError, KeyError) as exc:
        return EpisodeOutcome(episode, Annotation(attempts=0), None, f"replay: {str(exc).splitlines()[0]}")
    commands = [s.command for s in replay.steps]
    signature = hashlib.sha256("\n".join([episode.game_id, *commands]).encode()).hexdigest()[:32]
    annotation = await consolidator.annotate(episode, replay)
    if annotation.failure is not None:
        return EpisodeOutcome(episode, annotation, None, annotation.failure, len(commands), signature,
                              replay.first.objective)
    keys = {"episode_id": episode.episode_id, "consolidator": consolidator.name}
    built = build_examples(
        annotation.turns, replay, bank, load_prompt_set("alfworld/bpe"),
        StepBudget(max_steps=max(episode.max_steps, len(annotation.turns))), keys,
    )
    for row in built.examples:
        row |= {"bank_id": bank.bank_id, "bank_version": bank.version, "consolidation_run_id": run_id}
    return EpisodeOutcome(episode, annotation, built, None, len(commands), signature, replay.first.objective)


def _episode_row(outcome: EpisodeOutcome, consolidator: str, run_id: str, bank: ExperienceBankData,
                 engine: str) -> dict[str, Any]:
    ep, built = outcome.episode, outcome.built
    return {
        "episode_id": ep.episode_id, "consolidator": consolidator, "consolidation_run_id": run_id,
        "teacher": ep.teacher, "source_mode": ep.mode, "game_id": ep.game_id, "split": ep.split,
        "task_type": ep.task_type, "won": ep.won, "status": "failed" if outcome.failure else "ok",
        "failure_reason": outcome.failure, "attempts": outcome.annotation.attempts,
        "n_source_turns": len(ep.steps), "n_env_steps": outcome.n_env_steps,
        "n_examples": len(built.examples) if built else 0,
        "n_meta": sum(r["kind"] != "env" for r in built.examples) if built else 0,
        "action_sig": outcome.action_sig, "input_tokens": outcome.annotation.input_tokens,
        "output_tokens": outcome.annotation.output_tokens, "cost_usd": outcome.annotation.cost_usd,
        "bank_id": bank.bank_id, "bank_version": bank.version, "engine": engine,
        "created_at": datetime.now(UTC), "code_version": code_version(),
    }


def consolidate(
    config: ConsolidationConfig, db_path: str | Path, consolidator: Consolidator, run_id: str,
    on_progress: Callable[[int, int, EpisodeOutcome], None] | None = None,
) -> ConsolidationResult:
    """Consolidate ``config.teacher``'s episodes not yet done by ``consolidator``; resumable and idempotent."""
    from evoharness.envs.alfworld import DEFAULT_ENGINE

    engine = config.engine or DEFAULT_ENGINE
    crun = f"{run_id}:{consolidator.name}:{uuid.uuid4().hex[:8]}"
    started = time.perf_counter()
    with Warehouse(db_path) as wh:
        banks.ensure_seed(wh)
        bank = banks.load_bank(wh, config.bank_id, config.bank_version)
        done = set() if config.reconsolidate else consolidated_ids(wh, config.teacher, consolidator.name)
        planned = source_rows(wh, config.teacher, config.splits, config.modes, config.limit)
        batch_ids = pending_batches([row[0] for row in planned], done, config.batch_size)
        pending = {i for batch in batch_ids for i in batch}
        by_id = {e.episode_id: e for e in load_source_episodes(wh, [r for r in planned if r[0] in pending])}
        batches = [[by_id[i] for i in batch] for batch in batch_ids]
        episodes = [e for batch in batches for e in batch]
        contributed = banks.contributed_episodes(wh, config.bank_id)
        with wh.transaction():
            insert_rows(wh, "consolidation_runs", [{
                "consolidation_run_id": crun, "teacher": config.teacher, "consolidator": consolidator.name,
                "model": getattr(consolidator, "model", None), "prompt_id": getattr(consolidator, "prompt_id", None),
                "prompt_sha": getattr(consolidator, "prompt_sha", None), "engine": engine,
                "bank_id": bank.bank_id, "bank_version": bank.version, "n_episodes": len(episodes),
                "started_at": datetime.now(UTC), "code_version": code_version(), "run_id": run_id,
            }])
    result = ConsolidationResult(crun, planned=len(episodes), consolidated=0, failed=0)
    annotations: list[Annotation] = []
    if episodes:
        annotations = asyncio.run(_run_batches(config, db_path, consolidator, crun, engine, bank, batches,
                                            contributed, result, on_progress))
    result.seconds = time.perf_counter() - started
    calls: list[Annotation | EditorResult] = [*annotations, *result.editor_calls]
    result.input_tokens = _sum([c.input_tokens for c in calls])
    result.output_tokens = _sum([c.output_tokens for c in calls])
    result.cost_usd = _sum([c.cost_usd for c in calls])
    with Warehouse(db_path) as wh, wh.transaction():
        wh.execute("consolidation_run_finish", n_consolidated=result.consolidated, n_failed=result.failed,
                   input_tokens=result.input_tokens, output_tokens=result.output_tokens, cost_usd=result.cost_usd,
                   finished_at=datetime.now(UTC), consolidation_run_id=crun,
                   new_bank_version=result.bank_versions[-1] if result.bank_versions else None)
    return result


@dataclass(frozen=True)
class BankStep:
    """A batch's induced bank version, written with the batch's rows."""

    new: ExperienceBankData
    parent: ExperienceBankData
    edits: list[Edit]
    sources: list[str]


async def _run_batches(
    config: ConsolidationConfig, db_path: str | Path, consolidator: Consolidator, crun: str, engine: str,
    bank: ExperienceBankData, batches: list[list[SourceEpisode]], contributed: set[str],
    result: ConsolidationResult, on_progress: Callable[[int, int, EpisodeOutcome], None] | None,
) -> list[Annotation]:
    """Consolidate and commit each batch in order; the annotations (their token counts) of every episode.
    A batch's examples are dropped once committed, so memory stays bounded by one batch."""
    catalog = GameCatalog(config.data_root)
    gate = asyncio.Semaphore(config.concurrency)
    everything: list[Annotation] = []
    total = sum(len(batch) for batch in batches)
    workers = None if config.workers is None else min(config.workers, total)
    with EnvPool(workers=workers, engine=engine, expert=False) as pool:
        for batch in batches:

            async def one(ep: SourceEpisode, frozen: ExperienceBankData = bank) -> EpisodeOutcome:
                async with gate:
                    return await _consolidate_one(ep, consolidator, pool, catalog, frozen, config, crun)

            outcomes = await asyncio.gather(*(one(ep) for ep in batch))
            rows = [EpisodeRows(_episode_row(o, consolidator.name, crun, bank, engine),
                                *((o.built.examples, o.built.belief_rows, o.built.progress_rows) if o.built else ()))
                    for o in outcomes]
            step = await _evolve(bank, outcomes, contributed, consolidator, result) if config.evolve_bank else None
            with Warehouse(db_path) as wh, wh.transaction():
                replace_episodes_rows(wh, consolidator.name, rows)
                if step is not None:
                    banks.write_version(wh, step.new, step.parent, step.edits, step.sources, consolidator.name,
                                        crun)
            if step is not None:
                contributed.update(step.sources)
                result.bank_versions.append(step.new.version)
                bank = step.new
            for outcome in outcomes:
                result.failed += outcome.failure is not None
                result.consolidated += outcome.failure is None
                everything.append(outcome.annotation)
                if on_progress is not None:
                    on_progress(len(everything), total, outcome)
    return everything


async def _evolve(bank: ExperienceBankData, outcomes: list[EpisodeOutcome], contributed: set[str],
                  consolidator: Consolidator, result: ConsolidationResult) -> BankStep | None:
    """The next version induced from the batch's train episodes not yet induced (None: nothing to change).

    A consolidator with a ``bank_editor`` (the LLM one) turns the batch's lessons into edits itself; if its
    answers stay invalid, the rule-based lesson edits are used and the failure is logged as a SKIP edit.
    """
    evidence = [
        EpisodeEvidence(o.episode.episode_id, o.episode.task_type, o.episode.won,
                        TaskInfo.parse(o.objective).target,
                        o.built.digest, list(o.annotation.lessons) + o.episode.source_notes)
        for o in outcomes
        if o.built is not None and o.episode.split == "train" and o.episode.episode_id not in contributed
    ]
    if not evidence:
        return None
    usage: dict[str, int] = {}
    for item in evidence:
        for entry_id, used in item.digest.usage.items():
            usage[entry_id] = usage.get(entry_id, 0) + used
    lesson_edits: list[Edit] | None = None
    editor_failure: list[Edit] = []
    editor = getattr(consolidator, "bank_editor", None)
    lessons = lessons_of(evidence)
    if editor is not None and lessons:
        proposal = await editor.propose(bank, lessons)
        result.editor_calls.append(proposal)
        if proposal.failure is None:
            lesson_edits = proposal.edits
        else:
            editor_failure = [Edit("SKIP", Category.NOTES.value, None, None, None,
                                   f"LLM bank editor failed ({proposal.failure}); rule-based lesson edits used", None)]
    new, edits = evolve(bank, evidence, usage, lesson_edits)
    edits = editor_failure + edits
    if not [e for e in edits if e.op != "SKIP"] and not usage:
        return None
    return BankStep(new, bank, edits, [item.episode_id for item in evidence])
