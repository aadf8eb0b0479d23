"""Differential test: the fast engine against the real one (textworld PddlEnv), step by step.

For every game both engines replay the same commands: the stored walkthrough, seeded random walks over
admissible commands mixed with inadmissible ones, and one expert episode. Every step compares the
observation, the admissible commands (set and order), won, done, score, valid and the ground-truth facts.

``located`` is compared leniently for objects ALFWorld places in two receptacles at once (e.g. a keychain
in a safe that stands on a dresser): the real engine then reports whichever fact its hash-ordered set
yields last, which varies between processes; any receptacle actually holding the object is accepted.

CLI: ``python -m evoharness.envs.alfworld.differential --split all`` (exit status 1 on any mismatch).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import time
import zlib
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import asdict, dataclass, field
from functools import partial
from typing import Any

from evoharness.envs.alfworld.catalog import SPLITS, GameCatalog, GameRecord, load_game_file
from evoharness.envs.base import StepResult, WorldFacts

_FIELDS = ("observation", "admissible_commands", "won", "done", "score", "valid")
# Bumped whenever the comparison changes, so that a resumed run never mixes reports of different rules.
# 2: facts.located compared as the full set of receptacles holding each object (no leniency).
CHECKER_VERSION = 2
EXPERT_STEP_CAP = 60


@dataclass
class Mismatch:
    """One step where the engines disagree."""

    game_id: str
    source: str
    step: int
    command: str
    field: str
    real: str
    fast: str


@dataclass
class GameReport:
    """What the differential found for one game."""

    game_id: str
    split: str
    task_type: str
    steps: int = 0
    episodes: int = 0
    mismatches: list[Mismatch] = field(default_factory=list)
    seconds: float = 0.0
    error: str = ""
    checker: int = CHECKER_VERSION

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> GameReport:
        mismatches = [Mismatch(**m) for m in data.pop("mismatches", [])]
        return cls(**data, mismatches=mismatches)


@dataclass
class SplitSummary:
    split: str
    games: int = 0
    steps: int = 0
    mismatches: int = 0
    errors: int = 0
    seconds: float = 0.0


def _short(value: Any, limit: int = 400) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[:limit] + "..."


def compare_facts(real: WorldFacts, fast: WorldFacts) -> str | None:
    """Name the first differing field of two WorldFacts, or None."""
    for name in ("located", "holding", "opened", "flags", "agent_near", "receptacles"):
        if getattr(real, name) != getattr(fast, name):
            return f"facts.{name}"
    return None


def compare_step(real: StepResult, fast: StepResult, real_facts: WorldFacts, fast_facts: WorldFacts
                 ) -> tuple[str, str, str] | None:
    """(field, real value, fast value) of the first difference between two steps, or None."""
    for name in _FIELDS:
        if getattr(real, name) != getattr(fast, name):
            return name, _short(getattr(real, name)), _short(getattr(fast, name))
    bad = compare_facts(real_facts, fast_facts)
    if bad:
        return bad, _short(real_facts), _short(fast_facts)
    return None


def _inadmissible(rng: random.Random, names: Sequence[str], receps: Sequence[str], admissible: Iterable[str]) -> str:
    """A plausible command that is (almost always) not admissible now."""
    allowed = set(admissible)
    templates = [
        "take {o} from {r}", "move {o} to {r}", "go to {r}", "open {r}", "close {r}", "examine {o}",
        "use {o}", "heat {o} with {r}", "cool {o} with {r}", "clean {o} with {r}", "slice {o} with {o2}",
        "examine {r}", "jump", "look ", " inventory", "go to", "take", "put {o} in {r}",
    ]
    command = "jump"
    for _ in range(20):
        command = rng.choice(templates).format(o=rng.choice(names), o2=rng.choice(names), r=rng.choice(receps))
        if command not in allowed:
            break
    return command


class _Pair:
    """Both engines on one game, stepped together."""

    def __init__(self, game: GameRecord, report: GameReport) -> None:
        from evoharness.envs.alfworld.fast_engine import FastAlfworldEnv
        from evoharness.envs.alfworld.textworld_engine import TextWorldAlfworldEnv

        self.game = game
        self.report = report
        self.real = TextWorldAlfworldEnv(game)
        self.fast = FastAlfworldEnv(game)
        self.last: StepResult | None = None

    def _check(self, source: str, step: int, command: str, real: StepResult, fast: StepResult) -> bool:
        diff = compare_step(real, fast, self.real.facts(), self.fast.facts())
        self.report.steps += 1
        if diff is None:
            return True
        self.report.mismatches.append(Mismatch(self.game.game_id, source, step, command, *diff))
        return False

    def episode(self, source: str, seed: int, next_command: Callable[[StepResult, int], str | None]) -> None:
        """Reset both, then step both with ``next_command(last_result, step)`` until it returns None.

        Stops at the first mismatch (the states may have diverged after it)."""
        self.report.episodes += 1
        real, fast = self.real.reset(seed), self.fast.reset(seed)
        if not self._check(source, 0, "<reset>", real, fast):
            return
        step = 0
        while True:
            command = next_command(fast, step)
            if command is None:
                return
            step += 1
            real, fast = self.real.step(command), self.fast.step(command)
            if not self._check(source, step, command, real, fast):
                return

    def close(self) -> None:
        self.real.close()
        self.fast.close()


def run_game(game: GameRecord, seeds: Sequence[int] = (0, 1, 2), walk_steps: int = 30,
             invalid_rate: float = 0.2, expert: bool = True) -> GameReport:
    """Compare the engines on one game over every command source; never raises (errors are reported)."""
    report = GameReport(game.game_id, game.split, game.task_type)
    start = time.perf_counter()
    pair: _Pair | None = None
    try:
        pair = _Pair(game, report)
        walkthrough = list(load_game_file(game.game_path).get("walkthrough") or [])
        pair.episode("walkthrough", 0, lambda last, i: walkthrough[i] if i < len(walkthrough) else None)

        world = pair.fast.world
        obj_names = sorted(world.names[o] for o in world.object_type)
        recep_names = sorted(world.names[r] for r in world.recep_location)
        for seed in seeds:
            rng = random.Random(zlib.crc32(game.game_id.encode()) * 1000 + seed)

            def walk(last: StepResult, i: int, rng: random.Random = rng) -> str | None:
                if i >= walk_steps:
                    return None
                if rng.random() < invalid_rate:
                    return _inadmissible(rng, obj_names, recep_names, last.admissible_commands)
                return rng.choice(last.admissible_commands)

            pair.episode(f"random-{seed}", seed, walk)

        if expert:
            from evoharness.envs.alfworld.fast_engine import FastAlfworldEnv

            guide = FastAlfworldEnv(game, expert=True)
            first = guide.reset(seeds[0])
            plan = {"next": first.expert_plan[0] if first.expert_plan else None}

            def follow(last: StepResult, i: int) -> str | None:
                command = plan["next"]
                if command is None or i >= EXPERT_STEP_CAP or last.done:
                    return None
                result = guide.step(command)
                plan["next"] = result.expert_plan[0] if result.expert_plan else None
                return command

            pair.episode("expert", seeds[0], follow)
    except Exception as exc:  # noqa: BLE001 - reported per game, so one broken game does not stop the run
        report.error = f"{type(exc).__name__}: {exc}"
    finally:
        if pair is not None:
            pair.close()
    report.seconds = time.perf_counter() - start
    return report


def _init_worker() -> None:
    os.environ.setdefault("OMP_NUM_THREADS", "1")


def run_differential(games: Sequence[GameRecord], workers: int = 2, progress: bool = True,
                     on_report: Callable[[GameReport], None] | None = None, **kwargs: Any) -> list[GameReport]:
    """Run :func:`run_game` over ``games`` in a pool of ``workers`` processes (1 = in this process);
    ``on_report`` sees each game's report as soon as it is done."""
    reports: list[GameReport] = []
    start = time.perf_counter()

    def done(report: GameReport) -> None:
        reports.append(report)
        if on_report is not None:
            on_report(report)
        if progress:
            _progress(report, len(reports), len(games), start)

    if workers <= 1:
        for game in games:
            done(run_game(game, **kwargs))
        return reports
    with ProcessPoolExecutor(max_workers=workers, initializer=_init_worker) as pool:
        futures = [pool.submit(run_game, g, **kwargs) for g in games]
        for future in as_completed(futures):
            done(future.result())
    order = {g.game_id: i for i, g in enumerate(games)}
    reports.sort(key=lambda r: order[r.game_id])
    return reports


def _progress(report: GameReport, done: int, total: int, start: float) -> None:
    status = "ERROR " + report.error if report.error else f"{len(report.mismatches)} mismatches"
    print(f"[{done}/{total} {time.perf_counter() - start:.0f}s] {report.game_id}: {report.steps} steps, "
          f"{status} ({report.seconds:.1f}s)", file=sys.stderr, flush=True)


def summarize(reports: Sequence[GameReport]) -> list[SplitSummary]:
    by_split: dict[str, SplitSummary] = {}
    for report in reports:
        summary = by_split.setdefault(report.split, SplitSummary(report.split))
        summary.games += 1
        summary.steps += report.steps
        summary.mismatches += len(report.mismatches)
        summary.errors += bool(report.error)
        summary.seconds += report.seconds
    return [by_split[s] for s in SPLITS if s in by_split]


def format_table(summaries: Sequence[SplitSummary], wall: float) -> str:
    lines = [f"{'split':<14}{'games':>7}{'steps compared':>16}{'mismatches':>12}{'errors':>8}{'game-s':>9}"]
    for s in summaries:
        lines.append(f"{s.split:<14}{s.games:>7}{s.steps:>16}{s.mismatches:>12}{s.errors:>8}{s.seconds:>9.0f}")
    total = SplitSummary("total", sum(s.games for s in summaries), sum(s.steps for s in summaries),
                         sum(s.mismatches for s in summaries), sum(s.errors for s in summaries),
                         sum(s.seconds for s in summaries))
    lines.append(f"{total.split:<14}{total.games:>7}{total.steps:>16}{total.mismatches:>12}{total.errors:>8}"
                 f"{total.seconds:>9.0f}")
    lines.append(f"wall time: {wall:.0f} s")
    return "\n".join(lines)


def load_reports(path: str, game_ids: set[str]) -> dict[str, GameReport]:
    """Reports of ``game_ids`` already in the JSON-lines file ``path`` (current checker version, no errors)."""
    if not os.path.exists(path):
        return {}
    found: dict[str, GameReport] = {}
    with open(path) as handle:
        for line in handle:
            report = GameReport.from_json(json.loads(line))
            if report.game_id in game_ids and report.checker == CHECKER_VERSION and not report.error:
                found[report.game_id] = report
    return found


def append_report(path: str, report: GameReport) -> None:
    with open(path, "a") as handle:
        handle.write(json.dumps(asdict(report)) + "\n")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--split", default="all", choices=("all", *SPLITS))
    parser.add_argument("--limit", type=int, default=None, help="first N games per split (catalog order)")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--data-root", default=None, help="defaults to $ALFWORLD_DATA")
    parser.add_argument("--report", default=None,
                        help="append every game's report here as JSON lines, as soon as it is done; games "
                             "already reported (same checker version) are skipped, so a killed run resumes")
    parser.add_argument("--show", type=int, default=20, help="print at most this many mismatches")
    args = parser.parse_args(argv)

    catalog = GameCatalog(args.data_root)
    splits = SPLITS if args.split == "all" else (args.split,)
    games = [g for split in splits for g in catalog.games(split, limit=args.limit)]
    previous = load_reports(args.report, {g.game_id for g in games}) if args.report else {}
    todo = [g for g in games if g.game_id not in previous]
    if previous:
        print(f"resuming: {len(previous)} games already reported in {args.report}, {len(todo)} to go", file=sys.stderr)
    start = time.perf_counter()
    append = partial(append_report, args.report) if args.report else None
    fresh = {r.game_id: r for r in run_differential(todo, workers=args.workers, on_report=append)}
    wall = time.perf_counter() - start
    reports = [previous.get(g.game_id) or fresh[g.game_id] for g in games]
    shown = 0
    for report in reports:
        if report.error:
            print(f"ERROR {report.game_id}: {report.error}")
        for m in report.mismatches:
            if shown < args.show:
                print(f"MISMATCH {m.game_id} [{m.source} step {m.step}] command={m.command!r} field={m.field}\n"
                      f"  real: {m.real}\n  fast: {m.fast}")
            shown += 1
    print(format_table(summarize(reports), wall))
    failed = any(r.mismatches or r.error for r in reports)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
