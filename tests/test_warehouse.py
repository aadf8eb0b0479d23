"""The warehouse: ordered idempotent migrations, atomic idempotent episode writes."""

from datetime import UTC, datetime

import duckdb
import pytest

from evoharness.agents.records import EpisodeRecord, EpisodeSpec, StepRecord
from evoharness.harness.prompts import Mode
from warehouse import Warehouse
from warehouse.db import migration_files


def _record(game, status: str = "finished", won: bool = True, n_steps: int = 3) -> EpisodeRecord:
    spec = EpisodeSpec("expert", game, Mode.BPE, seed=0, max_steps=70, prompt_id="alfworld/bpe", prompt_sha="abc")
    steps = [
        StepRecord(t=t, kind="env", action="look", argument=None, think="", raw_output="<action>look</action>",
                   parse_error=None, observation="obs", admissible=True, won=won and t == n_steps - 1,
                   done=won and t == n_steps - 1, score=0.0, prompt="p", prompt_id="alfworld/bpe", prompt_sha="abc",
                   latency_ms=1.0)
        for t in range(n_steps)
    ]
    now = datetime.now(UTC)
    return EpisodeRecord(spec=spec, engine="textworld", started_at=now, finished_at=now, status=status,
                         failure_reason=None if status == "finished" else "PolicyError: boom", steps=steps)


def test_migrations_apply_once(tmp_path) -> None:
    path = tmp_path / "w.duckdb"
    with Warehouse(path) as first:
        versions = first.con.execute("SELECT version FROM schema_version ORDER BY 1").fetchall()
    assert [v for (v,) in versions] == [int(p.name[:3]) for p in migration_files()]
    with Warehouse(path) as second:
        assert second.migrate() == []
        assert second.con.execute("SELECT count(*) FROM schema_version").fetchone()[0] == len(versions)


def test_episode_write_is_idempotent(warehouse: Warehouse, catalog) -> None:
    game = catalog.games("valid_seen", limit=1)[0]
    record = _record(game)
    assert warehouse.write_episode(record, run_id="r1", code_version="v") is True
    assert warehouse.write_episode(record, run_id="r2", code_version="v") is False
    assert warehouse.con.execute("SELECT count(*), min(run_id) FROM episodes").fetchone() == (1, "r1")
    assert warehouse.con.execute("SELECT count(*) FROM steps").fetchone()[0] == 3
    assert warehouse.finished_episode_ids("expert") == {record.spec.episode_id}


def test_failed_episode_is_replaced_by_a_later_attempt(warehouse: Warehouse, catalog) -> None:
    game = catalog.games("valid_seen", limit=1)[0]
    warehouse.write_episode(_record(game, status="failed", won=False, n_steps=1), run_id="r1", code_version="v")
    assert warehouse.finished_episode_ids("expert") == set()
    row = warehouse.con.execute("SELECT status, won, failure_reason FROM episodes").fetchone()
    assert row == ("failed", False, "PolicyError: boom")
    warehouse.write_episode(_record(game), run_id="r2", code_version="v")
    assert warehouse.con.execute("SELECT status, won, n_steps FROM episodes").fetchall() == [("finished", True, 3)]
    assert warehouse.con.execute("SELECT count(*) FROM steps").fetchone()[0] == 3


def test_episode_write_is_atomic(warehouse: Warehouse, catalog) -> None:
    game = catalog.games("valid_seen", limit=1)[0]
    record = _record(game)
    record.steps.append(record.steps[0])  # a second step t=0 violates the primary key (episode_id, t)
    with pytest.raises(duckdb.Error):
        warehouse.write_episode(record, run_id="r1", code_version="v")
    assert warehouse.con.execute("SELECT count(*) FROM episodes").fetchone()[0] == 0
    assert warehouse.con.execute("SELECT count(*) FROM steps").fetchone()[0] == 0
