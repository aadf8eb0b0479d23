"""SQL lives in files: no Python string literal outside ``warehouse/`` holds a SQL statement, and every named query
a call reads exists in ``warehouse/queries/``."""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path

from warehouse.db import QUERIES_DIR

REPO = Path(__file__).resolve().parents[1]
SCANNED = ("evoharness", "evoharness_cli", "assets", "pipelines")

SQL_STATEMENT = re.compile(
    r"\bSELECT\s+(DISTINCT\s+)?[\w*(].{0,400}?\bFROM\b|\bINSERT\s+INTO\b|\bDELETE\s+FROM\b|\bUPDATE\s+\w+\s+SET\b"
    r"|\b(CREATE|ALTER|DROP)\s+(OR\s+REPLACE\s+)?(TEMP\w*\s+)?(TABLE|VIEW|MACRO|INDEX)\b",
    re.DOTALL)
"""Upper-case SQL keywords in the shape of a statement (prose such as "an UPDATE edit" does not match)."""



def _python_files() -> Iterator[Path]:
    for folder in SCANNED:
        yield from sorted((REPO / folder).rglob("*.py"))


def _literals(tree: ast.AST) -> Iterator[tuple[int, str]]:
    """(line, text) of every string constant and f-string (its placeholders read as ``{}``)."""
    for node in ast.walk(tree):
        if isinstance(node, ast.JoinedStr):
            yield node.lineno, "".join(str(v.value) if isinstance(v, ast.Constant) else "{}" for v in node.values)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            yield node.lineno, node.value


def _sql_literals(path: Path) -> list[str]:
    return [f"{path.relative_to(REPO)}:{line}: {text.strip()[:80]!r}"
            for line, text in _literals(ast.parse(path.read_text())) if SQL_STATEMENT.search(text)]


def test_the_pattern_finds_statements_and_not_prose() -> None:
    assert all(SQL_STATEMENT.search(s) for s in (
        "SELECT count(*) FROM episodes", "SELECT DISTINCT teacher\n FROM episodes", "INSERT INTO t BY NAME SELECT 1",
        "DELETE FROM {} WHERE x = ?", "UPDATE teachers SET a = 1", "CREATE OR REPLACE VIEW v AS SELECT 1"))
    assert not any(SQL_STATEMENT.search(s) for s in (
        "UPDATE and REMOVE must name existing entries", "Select the games from the catalog",
        "One DELETE per table for the whole batch", "SELECT"))


def test_no_python_string_outside_the_warehouse_holds_sql() -> None:
    found = [hit for path in _python_files() for hit in _sql_literals(path)]
    assert found == [], ("SQL belongs in warehouse/queries/<name>.sql, read with Warehouse.query/one/value/execute "
                         f"(name, **params): {found}")


_QUERY_METHODS = {"query", "one", "value", "execute"}
_WAREHOUSE_NAMES = {"wh", "warehouse"}
"""A named query is read by ``load_query(name)`` or ``<wh|warehouse>.<query|one|value|execute>(name, ...)``."""


def _query_name(node: ast.Call) -> str | None:
    if not (node.args and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str)):
        return None
    func = node.func
    reads = (isinstance(func, ast.Name) and func.id == "load_query") or (
        isinstance(func, ast.Attribute) and func.attr in _QUERY_METHODS
        and isinstance(func.value, ast.Name) and func.value.id in _WAREHOUSE_NAMES)
    return node.args[0].value if reads else None


def test_every_named_query_a_call_reads_exists() -> None:
    named: dict[str, str] = {}
    for path in [*_python_files(), *sorted((REPO / "benchmarks").rglob("*.py"))]:
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and (name := _query_name(node)) is not None:
                named[name] = f"{path.relative_to(REPO)}:{node.lineno}"
    assert len(named) > 30  # the scan sees the calls
    missing = {name: where for name, where in named.items() if not (QUERIES_DIR / f"{name}.sql").exists()}
    assert missing == {}
