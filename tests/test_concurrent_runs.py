"""Dagster runs sharing one warehouse (issue 30): four runs at once on a real Dagster instance, and a run whose wait
for the warehouse expires (slow).

Each run is a separate process executing its job against one ``DAGSTER_HOME`` (SQLite run and event storage), as
the run launcher starts them: three ``evaluate_student`` runs (three tiny model versions) and one collection of
``teacher_episodes``, all writing the same DuckDB file. DuckDB admits one writing process at a time; every stage
holds the file only around its writes and waits for it otherwise (docs/concurrency.md). Each run must succeed,
with every episode it planned stored exactly once, whole (steps and the attempt ledger).
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import duckdb
import pytest

from pipelines.instance import write_instance_config
from tests.conftest import subprocess_env, tiny_sft_settings, train_sft_version
from warehouse import Warehouse

pytestmark = pytest.mark.slow

GAMES_PER_EVALUATION = 3
GAMES_COLLECTED = 30
EVALUATION = {"splits": ["valid_seen"], "limit": GAMES_PER_EVALUATION, "max_steps": 8, "max_tokens": 32,
              "engine": "fast"}
COLLECTION = {"split": "valid_unseen", "limit": GAMES_COLLECTED, "engine": "fast", "workers": 0}

CHILD = """
import json, sys
import dagster as dg
from pipelines.definitions import defs
job, partition, config = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
if job == "teacher_episodes":
    key = dg.AssetKey(job)
    definition = defs.resolve_implicit_job_def_def_for_assets([key]).get_subset(asset_selection={key})
else:
    definition = defs.resolve_job_def(job)
with dg.DagsterInstance.get() as instance:
    result = definition.execute_in_process(run_config=config, instance=instance, partition_key=partition,
                                           raise_on_error=False)
print(json.dumps({"run_id": result.run_id, "success": result.success}))
"""
"""One run, as the run launcher would start it: its own process, the shared instance."""

HOLDER = """
import sys, duckdb
con = duckdb.connect(sys.argv[1])
print("held", flush=True)
sys.stdin.read()
"""
"""Holds the warehouse open for writing until its stdin closes (a writer that does not let go)."""


@pytest.fixture(scope="module")
def versions(tmp_path_factory: pytest.TempPathFactory, curated: tuple[Path, str]) -> tuple[Path, list[str]]:
    """A warehouse with expert episodes, a curated dataset and three tiny SFT versions (seeds 0, 1, 2)."""
    import shutil

    folder = tmp_path_factory.mktemp("concurrent")
    db = Path(shutil.copy(curated[0], folder / "w.duckdb"))
    with Warehouse(db) as wh:
        dataset = str(wh.scalar("SELECT dataset_id FROM datasets ORDER BY created_at DESC LIMIT 1"))
        trained = [train_sft_version(wh, dataset, tiny_sft_settings(max_steps=2, seed=seed), folder / "models", "t")
                   for seed in range(3)]
    return db, [v.model_version for v in trained]


@pytest.fixture
def instance_home(tmp_path: Path, versions: tuple[Path, list[str]]) -> Iterator[Path]:
    """A Dagster instance as ``evoharness init`` leaves it, with the teacher and model version partitions."""
    import dagster as dg

    from pipelines.partitions import register_model_version, register_teachers

    home = tmp_path / "dagster_home"
    write_instance_config(home)
    with dg.DagsterInstance.from_config(str(home)) as instance:
        register_teachers(instance)
        for version in versions[1]:
            register_model_version(instance, version)
    yield home


def _start(job: str, partition: str, config: dict, env: dict[str, str]) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-c", CHILD, job, partition, json.dumps(config)], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _finish(proc: subprocess.Popen[str], timeout: float = 900) -> dict:
    out, err = proc.communicate(timeout=timeout)
    assert proc.returncode == 0, err[-3000:]
    return json.loads(out.strip().splitlines()[-1])


def _env(db: Path, home: Path, alfworld_data: Path, **extra: str) -> dict[str, str]:
    return subprocess_env() | {"DAGSTER_HOME": str(home), "EVOHARNESS_DB": str(db), "ALFWORLD_DATA": str(alfworld_data),
                               "OMP_NUM_THREADS": "1"} | extra


def _waits(home: Path, run_ids: list[str]) -> list[float]:
    """The warehouse waits the runs logged ("waited N s for warehouse ..." of ``warehouse.db``, at least 5 s)."""
    import re

    import dagster as dg

    with dg.DagsterInstance.from_config(str(home)) as instance:
        return [float(m.group(1)) for run_id in run_ids for entry in instance.all_logs(run_id)
                if (m := re.search(r"waited ([0-9.]+)s for warehouse", entry.user_message or ""))]


def _episodes(db: Path, where: str, params: list) -> list[tuple]:
    """(episode_id, n_steps, stored steps, attempts) of the episodes ``where`` selects."""
    with duckdb.connect(str(db), read_only=True) as con:
        return con.execute(
            "SELECT e.episode_id, e.n_steps, (SELECT count(*) FROM steps s WHERE s.episode_id = e.episode_id), "
            f"(SELECT count(*) FROM episode_attempts a WHERE a.episode_id = e.episode_id) FROM episodes e WHERE {where}",
            params).fetchall()


def _assert_whole(rows: list[tuple], expected: int, what: str) -> None:
    assert len(rows) == len({r[0] for r in rows}) == expected, f"{what}: {len(rows)} episodes, expected {expected}"
    broken = [r for r in rows if r[1] != r[2] or r[3] != 1]
    assert not broken, f"{what}: episodes with missing steps or written twice (id, n_steps, steps, attempts): {broken}"


def test_four_runs_at_once_share_the_warehouse(tmp_path: Path, versions: tuple[Path, list[str]], instance_home: Path,
                                                alfworld_data: Path, record_property: Callable[[str, object], None]
                                                ) -> None:
    import shutil

    import dagster as dg

    db = Path(shutil.copy(versions[0], tmp_path / "w.duckdb"))
    env = _env(db, instance_home, alfworld_data)
    started = time.monotonic()
    runs = [_start("evaluate_student", version, {"ops": {"student_evaluation": {"config": EVALUATION}}}, env)
            for version in versions[1]]
    runs.append(_start("teacher_episodes", "expert", {"ops": {"teacher_episodes": {"config": COLLECTION}}}, env))
    results = [_finish(run) for run in runs]
    waits = _waits(instance_home, [r["run_id"] for r in results])
    print(f"4 runs in {time.monotonic() - started:.0f}s; warehouse waits of 5 s or more: {waits}")
    record_property("waits_s", waits)
    with dg.DagsterInstance.from_config(str(instance_home)) as instance:
        statuses = [instance.get_run_by_id(r["run_id"]).status for r in results]  # type: ignore[union-attr]
        materialized = {
            key: instance.get_materialized_partitions(dg.AssetKey(key)) for key in ("student_evaluation", "teacher_episodes")}
    assert all(r["success"] for r in results) and statuses == [dg.DagsterRunStatus.SUCCESS] * 4, results
    assert materialized == {"student_evaluation": set(versions[1]), "teacher_episodes": {"expert"}}
    for version in versions[1]:
        _assert_whole(_episodes(db, "model_version = ? AND split = 'valid_seen'", [version]), GAMES_PER_EVALUATION,
                      version)
    _assert_whole(_episodes(db, "teacher = 'expert' AND split = 'valid_unseen'", []), GAMES_COLLECTED,
                  "the collection")


def _retry_events(home: Path) -> list:
    import dagster as dg

    with dg.DagsterInstance.from_config(str(home)) as instance:
        return [entry.dagster_event for run in instance.get_runs()
                for entry in instance.all_logs(run.run_id, of_type=dg.DagsterEventType.STEP_UP_FOR_RETRY)]


def test_a_run_whose_wait_expires_fails_in_one_line_and_its_retry_finishes(
        tmp_path: Path, versions: tuple[Path, list[str]], instance_home: Path, alfworld_data: Path) -> None:
    """A writer holds the file past the run's wait: the step fails with one line naming that process and the fix,
    is up for retry (WAREHOUSE_RETRY), and once the holder lets go the retry plays every game once."""
    import shutil

    import dagster as dg

    db = Path(shutil.copy(versions[0], tmp_path / "w.duckdb"))
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(db)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              text=True)
    run = None
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        version = versions[1][0]
        run = _start("evaluate_student", version, {"ops": {"student_evaluation": {"config": EVALUATION}}},
                     _env(db, instance_home, alfworld_data, EVOHARNESS_LOCK_WAIT_S="2"))
        deadline = time.monotonic() + 600
        while not (events := _retry_events(instance_home)):
            assert run.poll() is None, run.communicate()
            assert time.monotonic() < deadline, "the step never failed on the held warehouse"
            time.sleep(2)
    finally:
        if holder.stdin is not None:
            holder.stdin.close()
        holder.wait(timeout=60)
    assert run is not None
    result = _finish(run)
    error = events[0].event_specific_data.error  # the retry request, caused by the step's dagster.Failure
    text = error.cause.message.removeprefix("dagster._core.definitions.events.Failure: ") if error.cause else ""
    assert result["success"], result
    assert f"PID {holder.pid}" in text and "EVOHARNESS_LOCK_WAIT_S" in text and "Traceback" not in text, text
    assert len(text.strip().splitlines()) == 1, text
    with dg.DagsterInstance.from_config(str(instance_home)) as instance:
        assert instance.get_run_by_id(result["run_id"]).status == dg.DagsterRunStatus.SUCCESS  # type: ignore[union-attr]
    _assert_whole(_episodes(db, "model_version = ? AND split = 'valid_seen'", [version]), GAMES_PER_EVALUATION,
                  version)
