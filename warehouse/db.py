"""The warehouse's one writer path: connection, ordered migrations, atomic idempotent episode writes.

DuckDB allows one writing process at a time; every write in the project goes through :class:`Warehouse`.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Self

import duckdb
import pyarrow as pa

from warehouse.drift import check_drift

MIGRATIONS_DIR = Path(__file__).resolve().parent / "migrations"
QUERIES_DIR = Path(__file__).resolve().parent / "queries"
DEFAULT_DB_PATH = Path(".evoharness") / "warehouse.duckdb"


def default_db_path() -> Path:
    """``$EVOHARNESS_DB``, else ``.evoharness/warehouse.duckdb`` under the current directory."""
    return Path(os.environ.get("EVOHARNESS_DB") or DEFAULT_DB_PATH)


def load_query(name: str) -> str:
    """The SQL text of ``warehouse/queries/<name>.sql``."""
    return (QUERIES_DIR / f"{name}.sql").read_text()


class WarehouseOpenError(RuntimeError):
    """The warehouse file cannot be used (a directory, not a DuckDB file, an uncreatable folder, locked)."""


_FIX_PATH = "Fix: pass a DuckDB file path with --db or $EVOHARNESS_DB (a new file is created)."


def _check_path(path: Path, read_only: bool) -> None:
    """Fail with one clear line before DuckDB does with a traceback."""
    if path.is_dir():
        raise WarehouseOpenError(f"warehouse {path} is a directory, not a file. {_FIX_PATH}")
    if read_only and not path.exists():
        raise WarehouseOpenError(f"warehouse {path} does not exist. {_FIX_PATH}")
    if not read_only:
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise WarehouseOpenError(f"cannot create the folder of warehouse {path} ({exc.strerror or exc}). "
                                     f"{_FIX_PATH}") from None


def migration_files() -> list[Path]:
    return sorted(MIGRATIONS_DIR.glob("[0-9][0-9][0-9]_*.sql"))


def _sha256(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


class Warehouse:
    """A DuckDB warehouse file with the project schema applied.

    DuckDB lets one process write a file at a time, so long-running work (a collection, a consolidation)
    calls :meth:`release` between writes and reconnects on the next use; :meth:`briefly` does both around
    a block. Connecting waits up to ``lock_wait_s`` while another process holds the file.
    """

    def __init__(self, path: str | os.PathLike | None = None, read_only: bool = False,
                 lock_wait_s: float = 120.0) -> None:
        self.path = Path(path) if path is not None else default_db_path()
        self.read_only = read_only
        self.lock_wait_s = lock_wait_s
        self._con: duckdb.DuckDBPyConnection | None = None
        _check_path(self.path, read_only)
        if not read_only:
            self.migrate()
        else:
            self._connect()
            self.verify()

    @property
    def con(self) -> duckdb.DuckDBPyConnection:
        """The open connection (reconnecting after :meth:`release`)."""
        return self._con if self._con is not None else self._connect()

    def _connect(self) -> duckdb.DuckDBPyConnection:
        deadline = time.monotonic() + self.lock_wait_s
        delay = 0.05
        while True:
            try:
                self._con = duckdb.connect(str(self.path), read_only=self.read_only)
                return self._con
            except duckdb.IOException as exc:
                if "lock" not in str(exc).lower() or time.monotonic() + delay > deadline:
                    raise WarehouseOpenError(self._open_problem(exc)) from exc
                time.sleep(delay)
                delay = min(delay * 2, 2.0)
            except (duckdb.Error, OSError) as exc:
                raise WarehouseOpenError(self._open_problem(exc)) from exc

    def _open_problem(self, exc: BaseException) -> str:
        text = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        if "lock" in text.lower():
            return (f"warehouse {self.path} is in use by another process (waited {self.lock_wait_s:g}s): {text}. "
                    "Fix: wait for that process, or use another file with --db.")
        if "not a valid duckdb" in text.lower() or "database file" in text.lower():
            return f"warehouse {self.path} is not a DuckDB database file ({text}). {_FIX_PATH}"
        return f"cannot open warehouse {self.path}: {text}. {_FIX_PATH}"

    def release(self) -> None:
        """Close the connection so that other processes can use the file; the next use reconnects."""
        if self._con is not None:
            self._con.close()
            self._con = None

    @contextmanager
    def briefly(self) -> Iterator[Warehouse]:
        """Hold the file only for the block."""
        try:
            yield self
        finally:
            self.release()

    def close(self) -> None:
        self.release()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- schema ---------------------------------------------------------------------------------------
    def verify(self) -> None:
        """Raise :class:`~warehouse.drift.MigrationDriftError` when an applied migration differs from its file."""
        known = self.con.execute("SELECT count(*) FROM information_schema.tables WHERE table_name = 'schema_version'"
                                 ).fetchone()
        if not known or not known[0]:
            return
        rows = self.con.execute("SELECT version, name, sha256 FROM schema_version ORDER BY version").fetchall()
        check_drift(self.path, [(int(v), str(n), str(s)) for v, n, s in rows],
                    {int(p.name[:3]): (p.name, _sha256(p.read_text())) for p in migration_files()})

    def migrate(self) -> list[str]:
        """Apply the migrations not yet recorded in ``schema_version``; returns the names applied."""
        self.con.execute(
            "CREATE TABLE IF NOT EXISTS schema_version ("
            " version INTEGER PRIMARY KEY, name VARCHAR NOT NULL, sha256 VARCHAR NOT NULL,"
            " applied_at TIMESTAMP NOT NULL)"
        )
        rows = self.con.execute("SELECT version, name, sha256 FROM schema_version ORDER BY version").fetchall()
        texts = {int(path.name[:3]): (path, path.read_text()) for path in migration_files()}
        check_drift(self.path, [(int(v), str(n), str(s)) for v, n, s in rows],
                    {v: (p.name, _sha256(sql)) for v, (p, sql) in texts.items()})
        applied = {row[0] for row in rows}
        done = []
        for version, (path, sql) in sorted(texts.items()):
            if version in applied:
                continue
            with self.transaction():
                self.con.execute(sql)
                self.con.execute(
                    "INSERT INTO schema_version VALUES (?, ?, ?, ?)",
                    [version, path.name, _sha256(sql), datetime.now(UTC)],
                )
            done.append(path.name)
        return done

    @contextmanager
    def transaction(self) -> Iterator[duckdb.DuckDBPyConnection]:
        con = self.con
        con.execute("BEGIN TRANSACTION")
        try:
            yield con
        except BaseException:
            con.execute("ROLLBACK")
            raise
        con.execute("COMMIT")

    def query(self, name: str, **params: Any) -> tuple[list[str], list[tuple]]:
        """Run a named query file with ``$name`` parameters; returns (column names, rows)."""
        cursor = self.con.execute(load_query(name), params)
        return [d[0] for d in cursor.description], cursor.fetchall()

    def scalar(self, sql: str, params: Sequence[Any] | dict[str, Any] | None = None) -> Any:
        """The first column of the first row of ``sql`` (an aggregate, a count)."""
        row = self.con.execute(sql, params).fetchone()
        if row is None:
            raise LookupError(f"no row for: {sql}")
        return row[0]

    # -- writes ---------------------------------------------------------------------------------------
    def insert(self, table: str, rows: Sequence[dict[str, Any]], skip_existing: bool = False,
               json_columns: Iterable[str] = ()) -> None:
        """Bulk insert through Arrow, matching columns by name; ``json_columns`` are serialised to JSON."""
        if not rows:
            return
        as_json = set(json_columns)
        prepared = [{k: json.dumps(v) if k in as_json else v for k, v in row.items()} for row in rows]
        batch = pa.Table.from_pylist(prepared)
        con = self.con
        con.register("_batch", batch)
        try:
            conflict = " ON CONFLICT DO NOTHING" if skip_existing else ""
            con.execute(f"INSERT INTO {table} BY NAME SELECT * FROM _batch{conflict}")
        finally:
            con.unregister("_batch")

    def upsert_games(self, rows: Iterable[dict[str, Any]]) -> int:
        """Insert catalog rows not yet present; returns how many the table now holds."""
        with self.transaction():
            self.insert("games", list(rows), skip_existing=True)
        return int(self.scalar("SELECT count(*) FROM games"))

    def finished_episode_ids(self, teacher: str) -> set[str]:
        rows = self.con.execute(
            "SELECT episode_id FROM episodes WHERE teacher = ? AND status = 'finished'", [teacher]
        ).fetchall()
        return {row[0] for row in rows}

    def write_episode(self, episode: dict[str, Any], steps: Sequence[dict[str, Any]]) -> bool:
        """Write an episode row and its step rows in one transaction. A finished episode already stored is
        kept (returns False); a failed one is replaced by the new attempt. Every write also appends a row to
        the ``episode_attempts`` ledger, so what a replaced attempt spent stays accounted. The rows are plain
        column → value mappings (the library builds them: ``evoharness.agents.rows``)."""
        episode_id = episode["episode_id"]
        with self.transaction():
            existing = self.con.execute("SELECT status FROM episodes WHERE episode_id = ?", [episode_id]).fetchone()
            if existing and existing[0] == "finished":
                return False
            if existing:
                self.con.execute("DELETE FROM steps WHERE episode_id = ?", [episode_id])
                self.con.execute("DELETE FROM episodes WHERE episode_id = ?", [episode_id])
            self.insert("episodes", [episode])
            self.insert("steps", [{"episode_id": episode_id, **step} for step in steps])
            attempt = self.scalar("SELECT count(*) + 1 FROM episode_attempts WHERE episode_id = ?", [episode_id])
            self.insert("episode_attempts", [{"attempt": attempt, **{k: episode[k] for k in ATTEMPT_COLUMNS}}])
        return True


ATTEMPT_COLUMNS = ("episode_id", "teacher", "mode", "status", "failure_reason", "won", "n_steps", "input_tokens",
                   "output_tokens", "cost_usd", "started_at", "finished_at", "run_id")
"""The ``episodes`` columns copied into the ``episode_attempts`` ledger on every write."""
