"""Shared fixtures: the real ALFWorld data, a temporary warehouse, single-threaded torch."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("ALFWORLD_DATA", str(REPO.parent / "shared" / "alfworld"))


@pytest.fixture(scope="session")
def alfworld_data() -> Path:
    """The ALFWorld data folder (``$ALFWORLD_DATA``, default ``../shared/alfworld``); tests need it."""
    from evoharness.envs.alfworld.catalog import resolve_data_root

    return resolve_data_root()


@pytest.fixture(scope="session")
def catalog(alfworld_data: Path):
    from evoharness.envs.alfworld.catalog import GameCatalog

    return GameCatalog(alfworld_data)


@pytest.fixture()
def warehouse(tmp_path: Path):
    from warehouse import Warehouse

    with Warehouse(tmp_path / "test.duckdb") as wh:
        yield wh
