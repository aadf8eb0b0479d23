"""The warehouse's one writer path: connection, ordered migrations, atomic idempotent episode writes.

DuckDB allows one writing process at a time; every write in the project goes through :class:`Warehouse`.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa

from evoharness.agents.records import EpisodeRecord

MIGRATIONS_DIR = Path(__file__).resolve().parent / "migrations"
QUERIES_DIR = Path(__file__).resolve().parent / "queries"
DEFAULT_DB_PATH = Path(".evoharness") / "warehouse.duckdb"


def default_db_path() -> Path:
    """``$EVOHARNESS_DB``, else ``.evoharness/warehouse.duckdb`` under the current directory."""
    return Path(os.environ.get("EVOHARNESS_DB") or DEFAULT_DB_PATH)


def load_query(name: str) -> str:
    """The SQL text of ``warehouse/queries/<name>.sql``."""
    return (QUERIES_DIR / f"{name}.sql").read_text()


def migration_files() -> list[Path]:
    return sorted(MIGRATIONS_DIR.glob("[0-9][0-9][0-9]_*.sql"))


class Warehouse:
    """A DuckDB warehouse file with the project schema applied."""

    def __init__(self, path: str | os.PathLike | None = None, read_only: bool = False) -> None:
        self.path = Path(path) if path is not None else default_db_path()
        if not read_only:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        self.con = duckdb.connect(str(self.path), read_only=read_only)
        if not read_only:
            self.migrate()

    def close(self) -> None:
        self.con.close()

    def __enter__(self) -> Warehouse:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- schema ---------------------------------------------------------------------------------------
    def migrate(self) -> list[str]:
        """Apply the migrations not yet recorded in ``schema_version``; returns the names applied."""
        self.con.execute(
            "CREATE TABLE IF NOT EXISTS schema_version ("
            " version INTEGER PRIMARY KEY, name VARCHAR NOT NULL, sha256 VARCHAR NOT NULL,"
            " applied_at TIMESTAMP NOT NULL)"
        )
        applied = {row[0] for row in self.con.execute("SELECT version FROM schema_version").fetchall()}
        done = []
        for path in migration_files():
            version = int(path.name[:3])
            if version in applied:
                continue
            sql = path.read_text()
            with self.transaction():
                self.con.execute(sql)
                self.con.execute(
                    "INSERT INTO schema_version VALUES (?, ?, ?, ?)",
                    [version, path.name, hashlib.sha256(sql.encode()).hexdigest(), datetime.now(UTC)],
                )
            done.append(path.name)
        return done

    @contextmanager
    def transaction(self) -> Iterator[duckdb.DuckDBPyConnection]:
        self.con.execute("BEGIN TRANSACTION")
        try:
            yield self.con
        except BaseException:
            self.con.execute("ROLLBACK")
            raise
        self.con.execute("COMMIT")

    def query(self, name: str, **params: Any) -> tuple[list[str], list[tuple]]:
        """Run a named query file with ``$name`` parameters; returns (column names, rows)."""
        cursor = self.con.execute(load_query(name), params)
        return [d[0] for d in cursor.description], cursor.fetchall()

    # -- writes ---------------------------------------------------------------------------------------
    def _insert(self, table: str, rows: Sequence[dict[str, Any]]) -> None:
        if not rows:
            return
        batch = pa.Table.from_pylist(list(rows))
        self.con.register("_batch", batch)
        try:
            self.con.execute(f"INSERT INTO {table} BY NAME SELECT * FROM _batch ON CONFLICT DO NOTHING")
        finally:
            self.con.unregister("_batch")

    def upsert_games(self, rows: Iterable[dict[str, Any]]) -> int:
        """Insert catalog rows not yet present; returns how many the table now holds."""
        with self.transaction():
            self._insert("games", list(rows))
        return self.con.execute("SELECT count(*) FROM games").fetchone()[0]

    def finished_episode_ids(self, teacher: str) -> set[str]:
        rows = self.con.execute(
            "SELECT episode_id FROM episodes WHERE teacher = ? AND status = 'finished'", [teacher]
        ).fetchall()
        return {row[0] for row in rows}

    def write_episode(self, record: EpisodeRecord, run_id: str, code_version: str) -> bool:
        """Write an episode and its steps in one transaction. A finished episode already stored is kept
        (returns False); a failed one is replaced by the new attempt."""
        episode_id = record.spec.episode_id
        with self.transaction():
            existing = self.con.execute("SELECT status FROM episodes WHERE episode_id = ?", [episode_id]).fetchone()
            if existing and existing[0] == "finished":
                return False
            if existing:
                self.con.execute("DELETE FROM steps WHERE episode_id = ?", [episode_id])
                self.con.execute("DELETE FROM episodes WHERE episode_id = ?", [episode_id])
            self._insert("episodes", [episode_row(record, run_id, code_version)])
            self._insert("steps", [{"episode_id": episode_id, **asdict(step)} for step in record.steps])
        return True


def episode_row(record: EpisodeRecord, run_id: str, code_version: str) -> dict[str, Any]:
    spec = record.spec
    return {
        "episode_id": spec.episode_id,
        "teacher": spec.teacher,
        "mode": spec.mode.value,
        "game_id": spec.game.game_id,
        "split": spec.game.split,
        "task_type": spec.game.task_type,
        "seed": spec.seed,
        "max_steps": spec.max_steps,
        "status": record.status,
        "failure_reason": record.failure_reason,
        "won": record.won,
        "n_steps": len(record.steps),
        "n_env_steps": sum(step.kind == "env" for step in record.steps),
        "n_harness_calls": record.n_harness_calls,
        "n_invalid": sum(step.kind == "invalid" for step in record.steps),
        "final_score": record.steps[-1].score if record.steps else None,
        "input_tokens": record.input_tokens,
        "output_tokens": record.output_tokens,
        "cost_usd": record.cost_usd,
        "started_at": record.started_at,
        "finished_at": record.finished_at,
        "prompt_id": spec.prompt_id,
        "prompt_sha": spec.prompt_sha,
        "engine": record.engine,
        "code_version": code_version,
        "run_id": run_id,
    }
