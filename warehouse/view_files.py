"""Views, and the macros they share, are defined once: one ``warehouse/views/*.sql`` file each, never in migrations.

Every writable open applies them after the migrations (:meth:`warehouse.Warehouse.apply_views`):

* A file is ``<tier>_<name>.sql`` holding one ``CREATE OR REPLACE VIEW|MACRO <name>``. Files apply in name order;
  a view reads only tables and the views of lower tiers (``00`` macros, ``10`` views over tables, ``20`` and up
  views over views).
* The table ``view_files`` (migration 080) records the sha256 of each file as applied. When the records match
  the files and every view exists, the open writes nothing; otherwise every file is applied again, in order,
  in one transaction, and a view or macro recorded earlier whose file is gone is dropped.
* A read-only open cannot write: it reads the views the last writable open applied.

To change a view, edit its file; to add one, add a file; to remove one, delete its file.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import duckdb

VIEWS_DIR = Path(__file__).resolve().parent / "views"

_FILE_NAME = re.compile(r"^(\d\d)_(\w+)\.sql$")
_CREATE = re.compile(r"^CREATE OR REPLACE (VIEW|MACRO) (\w+)\b", re.MULTILINE)


class ViewFileError(ValueError):
    """A file under ``warehouse/views/`` breaks the one-definition-per-file rule."""


@dataclass(frozen=True)
class ViewFile:
    """One file of ``warehouse/views/``: the view or macro it defines and its text."""

    file: str
    name: str
    kind: str  # VIEW | MACRO
    sql: str

    @property
    def sha256(self) -> str:
        return hashlib.sha256(self.sql.encode()).hexdigest()


def read_view_file(path: Path) -> ViewFile:
    """Parse one file; a name that is not ``<tier>_<name>.sql`` or a text that does not define exactly
    ``<name>`` is a :class:`ViewFileError`."""
    named = _FILE_NAME.match(path.name)
    if named is None:
        raise ViewFileError(f"{path}: a view file is named <two-digit tier>_<view name>.sql. Fix: rename it.")
    sql = path.read_text()
    created = _CREATE.findall(sql)
    if [name for _, name in created] != [named.group(2)]:
        raise ViewFileError(f"{path}: the file must hold exactly one CREATE OR REPLACE VIEW|MACRO "
                            f"{named.group(2)} (found: {[name for _, name in created] or 'none'}). "
                            "Fix: one view or macro per file, named as the file.")
    return ViewFile(file=path.name, name=named.group(2), kind=created[0][0], sql=sql)


def view_files(directory: Path | None = None) -> list[ViewFile]:
    """The files of ``directory`` (default :data:`VIEWS_DIR`) in the order they apply."""
    return [read_view_file(path) for path in sorted((directory or VIEWS_DIR).glob("*.sql"))]


def _existing_views(con: duckdb.DuckDBPyConnection) -> set[str]:
    return {str(r[0]) for r in con.execute("SELECT view_name FROM duckdb_views() "
                                           "WHERE NOT internal AND NOT temporary AND schema_name = 'main'").fetchall()}


def apply_views(con: duckdb.DuckDBPyConnection, files: list[ViewFile]) -> list[str]:
    """Bring the views of ``con`` to ``files`` (call inside a transaction). Returns the names applied: empty when
    the ``view_files`` records already matched and every view existed."""
    recorded = {str(r[0]): (str(r[1]), str(r[2]), str(r[3]))
                for r in con.execute("SELECT name, kind, file, sha256 FROM view_files").fetchall()}
    wanted = {f.name: (f.kind, f.file, f.sha256) for f in files}
    if recorded == wanted and {f.name for f in files if f.kind == "VIEW"} <= _existing_views(con):
        return []
    for name, (kind, _, _) in sorted(recorded.items()):
        if name not in wanted:
            con.execute(f"DROP {kind} IF EXISTS {name}")
    con.execute("DELETE FROM view_files")
    now = datetime.now(UTC)
    for f in files:
        con.execute(f.sql)
        con.execute("INSERT INTO view_files VALUES (?, ?, ?, ?, ?)", [f.name, f.kind, f.file, f.sha256, now])
    return [f.name for f in files]
