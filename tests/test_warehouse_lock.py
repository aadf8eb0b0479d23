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


def test_a_writer_that_never_drains_its_queue_still_lets_another_process_in(tmp_path: Path,
                                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """A fast teacher keeps the episode queue full for minutes; another process waiting for the file gets it
    within the writer's hold limit, not when the collection ends."""
    import asyncio
    import time

    from evoharness import collection

    db = tmp_path / "w.duckdb"
    wh = Warehouse(db)
    monkeypatch.setattr(collection, "episode_row", lambda *args: {})
    monkeypatch.setattr(collection, "step_rows", lambda record: [])

    def write_episode(row: dict, steps: list) -> bool:  # a real write's hold of the file, 10 s in all
        wh.con.execute("SELECT count(*) FROM schema_version").fetchall()
        time.sleep(0.05)
        return True

    monkeypatch.setattr(wh, "write_episode", write_episode)
    opener = ("import sys, time\nfrom warehouse import Warehouse\nstarted = time.monotonic()\n"
              "Warehouse(sys.argv[1], lock_wait_s=float(sys.argv[2])).close()\nprint(time.monotonic() - started)\n")

    async def write_all() -> None:
        with collection.EpisodeWriter(wh, "run", "code") as writer:
            await asyncio.gather(*(writer.write(None) for _ in range(200)))  # type: ignore[arg-type]

    writing = threading.Thread(target=asyncio.run, args=(write_all(),))
    writing.start()
    time.sleep(0.5)
    waited = subprocess.run([sys.executable, "-c", opener, str(db), "6"], check=False, capture_output=True, text=True,
                            cwd=Path(__file__).parents[1])
    writing.join()
    wh.close()
    assert waited.returncode == 0, waited.stderr.splitlines()[-1:]
    assert float(waited.stdout) < 6
