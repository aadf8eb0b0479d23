"""The warehouse's one writer path: connection, ordered migrations, atomic idempotent episode writes.

DuckDB allows one writing process at a time; every write in the project goes through :class:`Warehouse`.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import time
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Self

import duckdb
import pyarrow as pa

from warehouse.drift import check_drift
from warehouse.view_files import apply_views, view_files

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


class WarehouseLockedError(WarehouseOpenError):
    """Another process held the file past the wait. The only open error worth retrying: a lock clears."""


LOCK_WAIT_ENV = "EVOHARNESS_LOCK_WAIT_S"
DEFAULT_LOCK_WAIT_S = 120.0
"""How long opening waits for another process's write to end (docs/concurrency.md)."""

_HOLDER_RE = re.compile(r"\(PID (\d+)\)")
logger = logging.getLogger(__name__)


def default_lock_wait_s() -> float:
    """``$EVOHARNESS_LOCK_WAIT_S``, else :data:`DEFAULT_LOCK_WAIT_S`."""
    value = os.environ.get(LOCK_WAIT_ENV)
    try:
        return float(value) if value else DEFAULT_LOCK_WAIT_S
    except ValueError:
        raise WarehouseOpenError(f"${LOCK_WAIT_ENV}={value!r} is not a number of seconds. Fix: set it to e.g. "
                                 f"{DEFAULT_LOCK_WAIT_S:g} or unset it.") from None


def lock_holder(message: str) -> str:
    """``PID n (its command line)`` of the process DuckDB names as holding the lock, or ``another process``."""
    match = _HOLDER_RE.search(message)
    if match is None:
        return "another process"
    pid = match.group(1)
    try:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        command = " ".join(" ".join(a.decode(errors="replace") for a in argv).split())[:120]
    except OSError:
        command = ""
    return f"PID {pid} ({command})" if command else f"PID {pid}"


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
                 lock_wait_s: float | None = None) -> None:
        self.path = Path(path) if path is not None else default_db_path()
        self.read_only = read_only
        self.lock_wait_s = lock_wait_s if lock_wait_s is not None else default_lock_wait_s()
        self.waited_s = 0.0  # time spent waiting for other processes' locks, over this object's life
        self._con: duckdb.DuckDBPyConnection | None = None
        _check_path(self.path, read_only)
        if not read_only:
            self.migrate()
            self.apply_views()
        else:
            self._connect()
            self.verify()

    @property
    def con(self) -> duckdb.DuckDBPyConnection:
        """The open connection (reconnecting after :meth:`release`)."""
        return self._con if self._con is not None else self._connect()

    def _connect(self) -> duckdb.DuckDBPyConnection:
        """Connect, waiting up to ``lock_wait_s`` while another process writes (polling with capped backoff,
        at most every 0.5 s so that a short write does not cost a long sleep)."""
        started = time.monotonic()
        deadline = started + self.lock_wait_s
        delay = 0.02
        while True:
            try:
                self._con = duckdb.connect(str(self.path), read_only=self.read_only)
            except duckdb.IOException as exc:
                if "lock" not in str(exc).lower():
                    raise WarehouseOpenError(self._open_problem(exc)) from exc
                if time.monotonic() + delay > deadline:
                    self.waited_s += time.monotonic() - started
                    raise WarehouseLockedError(self._open_problem(exc)) from exc
                time.sleep(delay)
                delay = min(delay * 2, 0.5)
                continue
            except (duckdb.Error, OSError) as exc:
                raise WarehouseOpenError(self._open_problem(exc)) from exc
            waited = time.monotonic() - started
            self.waited_s += waited
            if waited >= 5.0:
                logger.info("waited %.1fs for warehouse %s (another process was writing)", waited, self.path)
            return self._con

    def _open_problem(self, exc: BaseException) -> str:
        text = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        if "lock" in text.lower():
            return (f"warehouse {self.path} is held by {lock_holder(text)} past the {self.lock_wait_s:g}s wait. "
                    f"Fix: rerun when it is done (every stage resumes), raise ${LOCK_WAIT_ENV}, or use another "
                    "file with --db.")
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

    def apply_views(self) -> list[str]:
        """Apply ``warehouse/views/`` (rules: :mod:`warehouse.view_files`); returns the names applied, empty when
        the warehouse already held these exact files."""
        files = view_files()
        with self.transaction() as con:
            return apply_views(con, files)

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

    def query(self, name: str, /, **params: Any) -> tuple[list[str], list[tuple]]:
        """Run a named query file with ``$name`` parameters; returns (column names, rows)."""
        cursor = self.con.execute(load_query(name), params)
        return [d[0] for d in cursor.description], cursor.fetchall()

    def execute(self, name: str, /, **params: Any) -> duckdb.DuckDBPyConnection:
        """Run the statements of a named query file in order, each with the ``$name`` parameters it uses; returns
        the connection holding the last one's result (``fetchall()``, ``fetchone()``, ``pl()``)."""
        statements = duckdb.extract_statements(load_query(name))
        unused = set(params) - {p for s in statements for p in s.named_parameters}
        if unused:
            raise TypeError(f"query {name} takes no parameter {sorted(unused)}: see warehouse/queries/{name}.sql")
        con = self.con
        for statement in statements:
            con.execute(statement, {key: params[key] for key in statement.named_parameters if key in params})
        return con

    def one(self, name: str, /, **params: Any) -> tuple | None:
        """The first row of a named query, or None when it has no row."""
        return self.execute(name, **params).fetchone()

    def value(self, name: str, /, **params: Any) -> Any:
        """The first column of the first row of a named query (an aggregate, a lookup by key); a
        :class:`LookupError` naming the query when it has no row."""
        row = self.one(name, **params)
        if row is None:
            raise LookupError(f"query {name} has no row for {params}")
        return row[0]

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
        """Insert catalog rows not yet present, and move known games to the split the catalog now gives them (the
        dev split is carved from train); returns how many the table now holds."""
        rows = list(rows)
        with self.transaction():
            self.insert("games", rows, skip_existing=True)
            self.con.executemany(load_query("game_split_update"),
                                 [{"game_id": r["game_id"], "split": r["split"]} for r in rows])
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
