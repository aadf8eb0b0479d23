"""Opening a warehouse another process holds: it waits, and a wait that runs out is one line naming the holder."""

from __future__ import annotations

import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from warehouse import Warehouse, WarehouseOpenError
from warehouse.db import LOCK_WAIT_ENV, WarehouseLockedError, default_lock_wait_s

HOLDER = "import sys, duckdb\ncon = duckdb.connect(sys.argv[1])\nprint('held', flush=True)\nsys.stdin.read()\n"


@pytest.fixture
def held(tmp_path: Path) -> Iterator[tuple[Path, subprocess.Popen[str]]]:
    """A warehouse file held open for writing by another process until its stdin closes."""
    db = tmp_path / "w.duckdb"
    Warehouse(db).close()
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(db)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              text=True)
    assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
    yield db, holder
    if holder.stdin is not None and not holder.stdin.closed:
        holder.stdin.close()
    holder.wait(timeout=60)


def test_a_wait_that_runs_out_names_the_holder_in_one_line(held: tuple[Path, subprocess.Popen[str]]) -> None:
    db, holder = held
    with pytest.raises(WarehouseLockedError) as caught:
        Warehouse(db, lock_wait_s=0.3)
    message = str(caught.value)
    assert f"PID {holder.pid}" in message and LOCK_WAIT_ENV in message and "--db" in message
    assert "\n" not in message
    assert isinstance(caught.value, WarehouseOpenError)  # callers that know the broader error still catch it


def test_opening_waits_for_the_holder_to_let_go(held: tuple[Path, subprocess.Popen[str]]) -> None:
    db, holder = held
    assert holder.stdin is not None
    threading.Timer(1.0, holder.stdin.close).start()
    with Warehouse(db, lock_wait_s=120) as wh:
        assert wh.scalar("SELECT count(*) FROM schema_version") > 0
        assert wh.waited_s > 0


def test_the_wait_comes_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(LOCK_WAIT_ENV, "7.5")
    assert default_lock_wait_s() == 7.5
    monkeypatch.setenv(LOCK_WAIT_ENV, "soon")
    with pytest.raises(WarehouseOpenError, match=f"{LOCK_WAIT_ENV}='soon' is not a number"):
        default_lock_wait_s()
