"""Layers point one way: warehouse ← library ← command line; Dagster (assets, pipelines) on top, never below."""

from __future__ import annotations

import json
import subprocess
import sys

from tests.conftest import subprocess_env

IMPORT_ALL = """
import importlib, json, pkgutil, sys
import {packages}
for package in [{packages}]:
    for module in pkgutil.walk_packages(package.__path__, package.__name__ + "."):
        if not module.name.endswith("__main__"):  # running the command line is not importing it
            importlib.import_module(module.name)
print(json.dumps(sorted({{name.split(".")[0] for name in sys.modules}})))
"""


def _top_level_modules_after_importing(*packages: str) -> set[str]:
    code = IMPORT_ALL.format(packages=", ".join(packages))
    done = subprocess.run([sys.executable, "-c", code], env=subprocess_env(), capture_output=True, text=True,
                          timeout=300, check=False)
    assert done.returncode == 0, done.stderr
    return set(json.loads(done.stdout.strip().splitlines()[-1]))


def test_library_cli_and_warehouse_import_no_dagster() -> None:
    loaded = _top_level_modules_after_importing("evoharness", "evoharness_cli", "warehouse")
    assert {"evoharness", "evoharness_cli", "warehouse", "typer", "duckdb"} <= loaded  # they were imported
    assert not loaded & {"dagster", "dagster_duckdb", "assets", "pipelines"}


def test_warehouse_imports_nothing_of_the_library() -> None:
    loaded = _top_level_modules_after_importing("warehouse")
    assert "warehouse" in loaded and not loaded & {"evoharness", "evoharness_cli", "dagster", "assets", "pipelines"}


def _imported_roots(folder: str) -> dict[str, set[str]]:
    """File → top-level modules it imports anywhere (function-level imports included), by reading the code."""
    import ast
    from pathlib import Path

    root = Path(__file__).resolve().parents[1] / folder
    found: dict[str, set[str]] = {}
    for path in root.rglob("*.py"):
        roots = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                roots |= {alias.name.split(".")[0] for alias in node.names}
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                roots.add(node.module.split(".")[0])
        found[str(path.relative_to(root.parent))] = roots
    return found


def test_no_import_points_the_wrong_way_even_inside_a_function() -> None:
    library = {f: r & {"dagster", "dagster_duckdb", "assets", "pipelines", "evoharness_cli"}
               for f, r in _imported_roots("evoharness").items()}
    store = {f: r & {"evoharness", "evoharness_cli", "dagster", "assets", "pipelines"}
             for f, r in _imported_roots("warehouse").items()}
    assert not {f: r for f, r in library.items() if r} and library
    assert not {f: r for f, r in store.items() if r} and store
