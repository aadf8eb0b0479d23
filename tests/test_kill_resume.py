"""Kill-anywhere equivalence (issue 30): every stage that writes, SIGKILLed at a random point and rerun,
ends in the state an uninterrupted run leaves.

The stages run as the real CLI in subprocesses, on a tiny chain: expert episodes on a few train games,
their consolidation, a curated dataset, a tiny SFT student (checkpointing every step), its GRPO child, its
evaluation and its relabelling. Each stage's *reference* is one uninterrupted run, starting from the
previous stage's reference state (a folder: warehouse file, datasets, models; never changed once made).
Then, per seed, the input state is copied, the command started and SIGKILLed (its whole process group, so
no worker survives it to hold the file) after a delay drawn uniformly between the moment the reference run
first changed its folder (before that it only imports, where a kill changes nothing) and ``KILL_END`` of
its wall time, and rerun to completion. The end state must equal the reference's:

- every warehouse table's rows (sorted, sha256) without the columns in :data:`VOLATILE` (what differs
  between any two runs: ids of the run, timestamps, durations, the working tree's code version, a run's own
  folder); tables that are one row per invocation (:data:`RUN_LOGS`) are left out. The stage's own tables
  (``Stage.owns``) must have changed against the input, so the comparison cannot pass vacuously;
- the artefacts: each dataset's data files and each model version's weights (``model.safetensors``), by
  sha256.

Bit-identity is required everywhere but in two places, each with its reason. (1) SFT on CPU resumes from
its newest checkpoint (optimizer, scheduler, RNG states and the data order restored by the Trainer) and is
deterministic single-threaded: a resumed run's weights equal an uninterrupted run's bit for bit. Its logged
losses do not: the Trainer keeps the running loss in memory, not in the checkpoint, so the first loss logged
after a resume averages only the steps since the resume, and ``train_loss`` sums only those. For these
columns (:data:`INEXACT`) the test compares which steps were logged, not the values. (2) GRPO
samples its rollouts, and two *uninterrupted* runs already differ there (they log different entropies from
the first step: episodes decoded together share batches whose make-up depends on timing), so no resume can
be bit-identical to them. For GRPO the test requires instead: the same model version id, steps and
curriculum episodes (greedy, bit-identical); the same learning-rate schedule step by step in
``rollout_history`` (a resume must neither repeat nor skip optimizer steps); and weights within
``2 · learning_rate · steps`` of the reference's, element-wise (an Adam step moves a weight by at most about
the learning rate, so two runs of ``steps`` steps from the same parent on different samples lie within that
of each other). The statistics of the sampled rollouts are compared likewise, by their steps.

Only the command list (:data:`STAGES`) names CLI flags. Seeds per stage: ``Stage.seeds``, or
``$EVOHARNESS_KILL_SEEDS`` for every stage. Most of the run time is each command's start (importing torch
and transformers).
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import duckdb
import numpy as np
import pytest
from safetensors.numpy import load_file

from tests.conftest import subprocess_env
from warehouse import Warehouse

pytestmark = pytest.mark.kill  # python -m pytest -m kill (minutes: .ci/run runs it after the slow tests)

KILL_END = 0.95
"""The latest kill, as a fraction of the reference run's wall time."""

VOLATILE: dict[str, str] = {
    "run_id": "a new id per invocation",
    "consolidation_run_id": "a new id per invocation",
    "created_at": "a timestamp",
    "started_at": "a timestamp",
    "finished_at": "a timestamp",
    "updated_at": "a timestamp",
    "applied_at": "a timestamp",
    "claimed_at": "a timestamp",
    "seconds": "a duration",
    "latency_ms": "a duration",
    "code_version": "the working tree's hash, which other work may change between two runs",
    "path": "the run's own folder; what is in it is compared by sha256 (artefacts)",
    "consolidation_runs": "a dataset's list of the run ids its examples came from",
}
"""Columns left out of every table's content hash, and why."""

INEXACT: dict[str, str] = {
    "loss_history": "each logged loss is the mean since the previous log, and the Trainer's running loss is not "
                    "checkpointed: the window that spans a resume averages only its steps after it",
    "train_loss": "the run's mean loss, summed over the steps of this invocation only after a resume",
    "rollout_history": "GRPO's statistics of sampled rollouts, which differ between any two runs",
}
"""``model_versions`` columns a stage may name in ``Stage.inexact``: compared by the steps they cover (and being
set), not by value, and why."""

RUN_LOGS: dict[str, str] = {
    "consolidation_runs": "one row per invocation: a resumed consolidation is two invocations",
    "schema_version": "migrations, applied before any stage",
    "view_files": "view definitions, applied before any stage",
}
"""Tables left out of the comparison, and why."""


@dataclass(frozen=True)
class Stage:
    """One writing command: its arguments (``{version}``: the SFT model version; datasets and models go to the
    warehouse's folder, the CLI's default), the stage whose reference state it starts from, the tables it
    writes, and how many kill seeds it gets."""

    name: str
    args: tuple[str, ...]
    after: str | None
    owns: tuple[str, ...]
    seeds: int = 3
    inexact: tuple[str, ...] = ()  # model_versions columns compared by the steps they cover (INEXACT)
    sampled: bool = False  # its training samples (GRPO): weights compared with the module docstring's tolerance


EPISODE_TABLES = ("episodes", "steps", "episode_attempts")
DATASET_TABLES = ("datasets", "dataset_examples", "dataset_games")
STAGES: dict[str, Stage] = {s.name: s for s in (
    Stage("collect", ("collect", "--teacher", "expert", "--split", "train", "--limit", "6", "--engine", "fast"),
          None, ("games", "teachers", *EPISODE_TABLES)),
    Stage("consolidate", ("consolidate", "--teacher", "expert", "--engine", "fast", "--batch-size", "2"),
          "collect", ("consolidated_episodes", "bpe_examples", "belief_checks", "progress_checks",
                      "experience_banks", "experience_bank_entries", "experience_edits")),
    Stage("curate", ("curate", "--teacher", "expert"), "consolidate", DATASET_TABLES),
    Stage("sft", ("sft", "--recipe", "tiny", "--max-steps", "6", "--save-steps", "1"), "curate",
          ("model_versions",), seeds=2, inexact=("loss_history", "train_loss")),
    Stage("grpo", ("grpo", "--recipe", "tiny", "--engine", "fast", "--set", "curriculum.limit=2", "--max-steps", "2",
                   "--save-steps", "1", "--games-per-step", "1", "--num-generations", "2", "--episode-steps", "6",
                   "--max-new-tokens", "24"), "sft", ("model_versions", *EPISODE_TABLES), seeds=2, sampled=True,
          inexact=("loss_history", "train_loss", "rollout_history")),
    Stage("evaluate", ("evaluate", "--model-version", "{version}", "--split", "valid_seen", "--limit", "2",
                       "--engine", "fast", "--max-steps", "8", "--max-tokens", "32"), "sft", EPISODE_TABLES, seeds=2),
    Stage("relabel", ("relabel", "--model-version", "{version}", "--recipe", "tiny", "--limit", "2", "--max-steps",
                      "8", "--max-tokens", "32"), "sft", (*EPISODE_TABLES, *DATASET_TABLES), seeds=2),
)}


def _env(folder: Path) -> dict[str, str]:
    return subprocess_env() | {"EVOHARNESS_DB": str(folder / "w.duckdb"), "OMP_NUM_THREADS": "1",
                               "COLUMNS": "200", "EVOHARNESS_FORMAT": "json"}


def _argv(stage: Stage, folder: Path, version: str | None) -> list[str]:
    args = [a.replace("{version}", version or "") for a in stage.args]
    return [sys.executable, "-m", "evoharness_cli", *args]


def _signature(folder: Path) -> tuple[int, int]:
    """(files, newest modification) under ``folder``: changes when a run writes anything there."""
    stats = []
    for path in folder.rglob("*"):
        try:
            stats.append(path.stat().st_mtime_ns)
        except FileNotFoundError:  # removed while we looked (a rotated checkpoint): a change all the same
            stats.append(-1)
    return len(stats), max(stats, default=0)


def _run(stage: Stage, folder: Path, version: str | None, timeout: float = 600) -> tuple[float, float]:
    """Run ``stage`` in ``folder`` to completion; (wall time, when it first changed the folder)."""
    started = time.monotonic()
    initial, first_write = _signature(folder), None
    with subprocess.Popen(_argv(stage, folder, version), env=_env(folder), stdout=subprocess.DEVNULL,
                          stderr=subprocess.PIPE, text=True) as proc:
        while proc.poll() is None:
            if first_write is None and _signature(folder) != initial:
                first_write = time.monotonic() - started
            assert time.monotonic() - started < timeout, f"{stage.name} ran past {timeout}s"
            time.sleep(0.25)
        err = proc.stderr.read() if proc.stderr else ""
    assert proc.returncode == 0, f"{stage.name} failed (exit {proc.returncode}):\n{err[-3000:]}"
    seconds = time.monotonic() - started
    return seconds, first_write if first_write is not None else 0.3 * seconds


def _kill_after(stage: Stage, folder: Path, version: str | None, delay: float) -> float | None:
    """Start ``stage`` and SIGKILL its process group after ``delay`` s; None when killed, else the seconds it took
    to finish first."""
    started = time.monotonic()
    proc = subprocess.Popen(_argv(stage, folder, version), env=_env(folder), stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        proc.wait(timeout=delay)
        return time.monotonic() - started
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        return None


def _copy_state(source: Path, target: Path) -> Path:
    shutil.copytree(source, target)
    return target


def _rows_sha(con: duckdb.DuckDBPyConnection, table: str, inexact: tuple[str, ...]) -> tuple[int, str]:
    columns = [r[0] for r in con.execute("SELECT column_name FROM information_schema.columns WHERE table_name = ? "
                                         "ORDER BY ordinal_position", [table]).fetchall()]
    left_out = VOLATILE.keys() | (set(inexact) if table == "model_versions" else set())
    kept = ", ".join(f'"{c}"' for c in columns if c not in left_out)
    rows = con.execute(f'SELECT {kept} FROM "{table}"').fetchall()
    lines = sorted(json.dumps(list(row), default=str) for row in rows)
    return len(lines), hashlib.sha256("\n".join(lines).encode()).hexdigest()


def _steps(value: object) -> object:
    """What a history or loss column covers: the logged steps of a history, whether a scalar is set."""
    if isinstance(value, str):
        value = json.loads(value)
    if isinstance(value, list):
        return [item.get("step") if isinstance(item, dict) else item[0] for item in value]
    return value is not None


def _columns_differing(reference: Path, folder: Path, table: str, inexact: tuple[str, ...]) -> list[str]:
    """The columns of ``table`` whose sorted values differ between two folders (what a failure reports)."""
    values = []
    for where in (reference, folder):
        with duckdb.connect(str(where / "w.duckdb"), read_only=True) as con:
            columns = [r[0] for r in con.execute("SELECT column_name FROM information_schema.columns WHERE "
                                                 "table_name = ?", [table]).fetchall()]
            values.append({c: sorted(json.dumps(r[0], default=str) for r in con.execute(f'SELECT "{c}" FROM "{table}"')
                                     .fetchall()) for c in columns if c not in VOLATILE and c not in inexact})
    return sorted(c for c in values[0].keys() | values[1].keys() if values[0].get(c) != values[1].get(c))


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def state(folder: Path, inexact: tuple[str, ...] = ()) -> dict[str, object]:
    """A folder's end state: every table's (rows, content sha) and every dataset's and model's files, by sha."""
    with duckdb.connect(str(folder / "w.duckdb"), read_only=True) as con:
        tables = [r[0] for r in con.execute("SELECT table_name FROM information_schema.tables "
                                            "WHERE table_type = 'BASE TABLE' ORDER BY 1").fetchall()]
        result: dict[str, object] = {t: _rows_sha(con, t, inexact) for t in tables if t not in RUN_LOGS}
        for column in inexact:  # the steps each version's history covers, and whether the value is set
            rows = con.execute(f'SELECT model_version, "{column}" FROM model_versions ORDER BY 1').fetchall()
            result[f"model_versions.{column} (steps)"] = [(v, _steps(value)) for v, value in rows]
        datasets = con.execute("SELECT dataset_id, path FROM datasets ORDER BY 1").fetchall()
        models = con.execute("SELECT model_version, path FROM model_versions ORDER BY 1").fetchall()
    for dataset_id, path in datasets:
        files = sorted(p for p in Path(path).rglob("*.arrow") if not p.name.startswith("cache-"))
        result[f"dataset {dataset_id}"] = [(str(p.relative_to(path)), _sha(p)) for p in files]
    for version, path in models:
        result[f"weights {version}"] = _sha(Path(path) / "model.safetensors")
    return result


def _grpo(folder: Path) -> tuple[str, list[tuple], dict[str, np.ndarray], float]:
    """The GRPO version of ``folder``: its id, its schedule (step, epoch, learning rate per logged step), its
    weights, and the tolerance ``2 · learning_rate · steps``."""
    with duckdb.connect(str(folder / "w.duckdb"), read_only=True) as con:
        version, path, history, settings, steps = con.execute(
            "SELECT model_version, path, rollout_history, settings, steps FROM model_versions WHERE stage = 'grpo'"
        ).fetchone()  # type: ignore[misc]
    schedule = [(h.get("step"), h.get("epoch"), h.get("learning_rate")) for h in json.loads(history)]
    return version, schedule, load_file(str(Path(path) / "model.safetensors")), \
        2 * float(json.loads(settings)["learning_rate"]) * int(steps)


def _grpo_differences(reference: Path, folder: Path) -> list[str]:
    """What differs between two GRPO versions beyond the tolerance of the module docstring."""
    version, schedule, weights, atol = _grpo(reference)
    got_version, got_schedule, got_weights, _ = _grpo(folder)
    problems = [] if got_version == version else [f"model version {got_version} != {version}"]
    if got_schedule != schedule:
        problems.append(f"schedule (step, epoch, learning rate) {got_schedule} != {schedule}")
    if got_weights.keys() != weights.keys():
        return [*problems, "different weight tensors"]
    worst = max(float(np.abs(got_weights[k] - weights[k]).max()) for k in weights)
    if worst > atol:
        problems.append(f"weights differ by up to {worst:.3g} > {atol:.3g}")
    return problems


class Chain:
    """The reference states, built once per module in stage order (each from the one before)."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.folders: dict[str, Path] = {}
        self.seconds: dict[str, tuple[float, float]] = {}  # (wall time, first write) of each reference run
        empty = root / "empty"
        empty.mkdir(parents=True)
        Warehouse(empty / "w.duckdb").close()  # the schema, as `evoharness init` leaves it
        self.folders["empty"] = empty

    def input_of(self, stage: Stage) -> Path:
        return self.reference(STAGES[stage.after]) if stage.after else self.folders["empty"]

    def reference(self, stage: Stage) -> Path:
        if stage.name not in self.folders:
            source = self.input_of(stage)
            folder = _copy_state(source, self.root / f"ref-{stage.name}")
            self.seconds[stage.name] = _run(stage, folder, self.version())
            self.folders[stage.name] = folder
        return self.folders[stage.name]

    def version(self) -> str | None:
        """The SFT model version (None before the SFT reference exists)."""
        folder = self.folders.get("sft")
        if folder is None:
            return None
        with duckdb.connect(str(folder / "w.duckdb"), read_only=True) as con:
            row = con.execute("SELECT model_version FROM model_versions WHERE stage = 'sft'").fetchone()
        return str(row[0]) if row else None


@pytest.fixture(scope="module")
def chain(tmp_path_factory: pytest.TempPathFactory, alfworld_data: Path) -> Iterator[Chain]:
    yield Chain(tmp_path_factory.mktemp("kill-resume"))


SEEDS_ENV = "EVOHARNESS_KILL_SEEDS"
"""Set to N to give every stage N seeds (e.g. 1 for a quick pass, 5 for a thorough one)."""
CASES = [(name, seed) for name, stage in STAGES.items()
         for seed in range(int(os.environ.get(SEEDS_ENV) or stage.seeds))]


@pytest.mark.parametrize(("name", "seed"), CASES, ids=[f"{n}-seed{s}" for n, s in CASES])
def test_killed_and_rerun_equals_uninterrupted(chain: Chain, tmp_path: Path, name: str, seed: int) -> None:
    stage = STAGES[name]
    reference = chain.reference(stage)
    before, expected = state(chain.input_of(stage)), state(reference, stage.inexact)
    changed = [t for t in stage.owns if before.get(t) != expected.get(t)]
    assert changed == list(stage.owns), f"{name} did not write {set(stage.owns) - set(changed)}: nothing to compare"
    folder = _copy_state(chain.input_of(stage), tmp_path / "run")
    version = chain.version()
    rng = random.Random(f"{name}-{seed}")
    seconds, first_write = chain.seconds[name]
    delay = rng.uniform(min(first_write, KILL_END * seconds), KILL_END * seconds)
    finished = _kill_after(stage, folder, version, delay)
    for _ in range(3):  # it finished first (the machine got quicker): again from the input, the delay scaled
        if finished is None:
            break
        shutil.rmtree(folder)
        _copy_state(chain.input_of(stage), folder)
        delay *= 0.9 * finished / seconds
        finished = _kill_after(stage, folder, version, delay)
    assert finished is None, f"{name} always finished before the kill; nothing was interrupted"
    partial = state(folder)
    written = sorted(t for t in stage.owns if partial.get(t) != before.get(t)) or "none"
    print(f"{name}: killed after {delay:.1f}s (reference: {seconds:.1f}s, first write at {first_write:.1f}s); "
          f"tables written before the kill: {written}")
    _run(stage, folder, version)
    got = state(folder, stage.inexact)
    differing = sorted(k for k in expected.keys() | got.keys() if expected.get(k) != got.get(k))
    if stage.sampled:  # the GRPO version's weights: within the tolerance, not by sha
        tolerated = _grpo_differences(reference, folder)
        assert not tolerated, f"{name} killed after {delay:.1f}s and rerun: {tolerated}"
        differing = [k for k in differing if not (k.startswith("weights ") and "-grpo-" in k)]
    details = {k: _columns_differing(reference, folder, k, stage.inexact) if " " not in k  # a table
               else (expected.get(k), got.get(k)) for k in differing}
    assert not differing, f"{name} killed after {delay:.1f}s and rerun differs from an uninterrupted run: {details}"
