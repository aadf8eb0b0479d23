"""The warehouse: ordered idempotent migrations, atomic idempotent episode writes."""

from datetime import UTC, datetime

import duckdb
import pytest

from evoharness.agents.records import EpisodeRecord, EpisodeSpec, StepRecord
from evoharness.agents.rows import episode_row, step_rows
from evoharness.harness.prompts import Mode
from warehouse import Warehouse
from warehouse.db import migration_files


def _record(game, status: str = "finished", won: bool = True, n_steps: int = 3, tokens: int | None = None,
            ) -> EpisodeRecord:
    spec = EpisodeSpec("expert", game, Mode.BPE, seed=0, max_steps=70, prompt_id="alfworld/bpe", prompt_sha="abc")
    steps = [
        StepRecord(t=t, kind="env", action="look", argument=None, think="", raw_output="<action>look</action>",
                   parse_error=None, observation="obs", admissible=True, won=won and t == n_steps - 1,
                   done=won and t == n_steps - 1, score=0.0, prompt="p", prompt_id="alfworld/bpe", prompt_sha="abc",
                   latency_ms=1.0, input_tokens=tokens, output_tokens=tokens,
                   cost_usd=None if tokens is None else tokens / 1e6)
        for t in range(n_steps)
    ]
    now = datetime.now(UTC)
    return EpisodeRecord(spec=spec, engine="textworld", started_at=now, finished_at=now, status=status,
                         failure_reason=None if status == "finished" else "PolicyError: boom", steps=steps)


def _write(warehouse: Warehouse, record: EpisodeRecord, run_id: str, code_version: str = "v") -> bool:
    return warehouse.write_episode(episode_row(record, run_id, code_version), step_rows(record))


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
    assert _write(warehouse, record, "r1") is True
    assert _write(warehouse, record, "r2") is False
    assert warehouse.con.execute("SELECT count(*), min(run_id) FROM episodes").fetchone() == (1, "r1")
    assert warehouse.con.execute("SELECT count(*) FROM steps").fetchone()[0] == 3
    assert warehouse.finished_episode_ids("expert") == {record.spec.episode_id}


def test_failed_episode_is_replaced_by_a_later_attempt(warehouse: Warehouse, catalog) -> None:
    game = catalog.games("valid_seen", limit=1)[0]
    _write(warehouse, _record(game, status="failed", won=False, n_steps=1), "r1")
    assert warehouse.finished_episode_ids("expert") == set()
    row = warehouse.con.execute("SELECT status, won, failure_reason FROM episodes").fetchone()
    assert row == ("failed", False, "PolicyError: boom")
    _write(warehouse, _record(game), "r2")
    assert warehouse.con.execute("SELECT status, won, n_steps FROM episodes").fetchall() == [("finished", True, 3)]
    assert warehouse.con.execute("SELECT count(*) FROM steps").fetchone()[0] == 3


def test_attempt_ledger_keeps_what_replaced_attempts_spent(warehouse: Warehouse, catalog) -> None:
    game = catalog.games("valid_seen", limit=1)[0]
    _write(warehouse, _record(game, status="failed", won=False, n_steps=2, tokens=100), "r1")
    _write(warehouse, _record(game, status="failed", won=False, n_steps=1, tokens=100), "r2")
    _write(warehouse, _record(game, n_steps=3, tokens=100), "r3")
    _write(warehouse, _record(game, n_steps=3, tokens=100), "r4")  # already finished: no attempt
    attempts = warehouse.con.execute(
        "SELECT attempt, status, input_tokens, run_id FROM episode_attempts ORDER BY attempt").fetchall()
    assert attempts == [(1, "failed", 200, "r1"), (2, "failed", 100, "r2"), (3, "finished", 300, "r3")]
    columns, rows = warehouse.query("teacher_costs")
    view = dict(zip(columns, rows[0], strict=True))
    assert (view["episodes"], view["attempts"], view["won"]) == (1, 3, 1)
    assert view["input_tokens"] == 600 and view["cost_usd"] == pytest.approx(600 / 1e6)
    assert view["cost_per_success"] == pytest.approx(600 / 1e6)

    # migration 025 backfills episodes stored before the ledger existed, and is safe to apply again
    warehouse.con.execute("DELETE FROM episode_attempts")
    warehouse.con.execute("DELETE FROM schema_version WHERE name = '025_episode_attempts.sql'")
    assert warehouse.migrate() == ["025_episode_attempts.sql"]
    assert warehouse.con.execute("SELECT attempt, status, input_tokens FROM episode_attempts").fetchall() == [
        (1, "finished", 300)]


def test_episode_write_is_atomic(warehouse: Warehouse, catalog) -> None:
    game = catalog.games("valid_seen", limit=1)[0]
    record = _record(game)
    record.steps.append(record.steps[0])  # a second step t=0 violates the primary key (episode_id, t)
    with pytest.raises(duckdb.Error):
        _write(warehouse, record, "r1")
    assert warehouse.con.execute("SELECT count(*) FROM episodes").fetchone()[0] == 0
    assert warehouse.con.execute("SELECT count(*) FROM steps").fetchone()[0] == 0
