"""A collection killed halfway (SIGKILL of the CLI process group) resumes on rerun: finished episodes are
kept and skipped, the rest are collected, nothing is duplicated."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import duckdb

from evoharness.testing.alfworld_player import WalkthroughPlayer
from evoharness.testing.loopback import LoopbackServer
from evoharness.testing.responders import ConcurrencyProbe
from evoharness.testing.teachers import TEST_KEY_ENV, loopback_teacher, write_registry
from tests.conftest import subprocess_env

REPO = Path(__file__).resolve().parents[1]
os.environ.setdefault("ALFWORLD_DATA", str(REPO.parent / "shared" / "alfworld"))
ENGINE = os.environ.get("EVOHARNESS_TEST_ENGINE", "fast")
GAMES = 8


def group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    return True


def stored(db: Path) -> dict[str, tuple[str, str]]:
    with duckdb.connect(str(db), read_only=True) as con:
        rows = con.execute("SELECT episode_id, status, run_id FROM episodes WHERE teacher = 'lb'").fetchall()
    return {episode_id: (status, run_id) for episode_id, status, run_id in rows}


def test_killed_collection_resumes(tmp_path: Path) -> None:
    db, registry = tmp_path / "wh.duckdb", tmp_path / "teachers.yaml"
    player = WalkthroughPlayer.for_split("valid_seen", GAMES)
    with LoopbackServer(ConcurrencyProbe(player, hold_s=0.1)) as server:
        write_registry(registry, loopback_teacher("lb", "openai", server, max_concurrency=2))
        env = subprocess_env() | {"EVOHARNESS_TEACHERS": str(registry), "EVOHARNESS_DB": str(db),
                                  TEST_KEY_ENV: "sk-resume-test-0123456789"}
        command = [sys.executable, "-m", "evoharness_cli", "collect", "--teacher", "lb", "--split", "valid_seen",
                   "--limit", str(GAMES), "--max-steps", "30", "--engine", ENGINE, "--workers", "1",
                   "--concurrency", "2"]
        proc = subprocess.Popen(command, env=env, cwd=tmp_path, start_new_session=True,
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 120
        while len(server.calls) < 30 and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert proc.poll() is None, "the collection ended before it could be killed"
        os.killpg(proc.pid, signal.SIGKILL)  # the CLI and its environment workers, like a crash
        proc.wait(timeout=30)
        for _ in range(100):  # no orphaned environment worker survives
            if not group_alive(proc.pid):
                break
            time.sleep(0.05)
        assert not group_alive(proc.pid)
        calls_before = len(server.calls)
        before = stored(db)
        assert 0 < len(before) < GAMES, f"{len(before)} episodes stored when killed"

        rerun = subprocess.run(command, env=env, cwd=tmp_path, capture_output=True, text=True, timeout=300,
                               check=False)
        assert rerun.returncode == 0, rerun.stdout + rerun.stderr
        assert f"planned {GAMES}, already stored {sum(s == 'finished' for s, _ in before.values())}" in rerun.stdout
        after = stored(db)
        calls_after = len(server.calls) - calls_before
    assert len(after) == GAMES and all(status == "finished" for status, _ in after.values())
    kept = {eid: value for eid, value in before.items() if value[0] == "finished"}
    assert all(after[eid] == value for eid, value in kept.items())  # finished episodes were not re-run
    assert len({run_id for _, run_id in after.values()}) == 2
    with duckdb.connect(str(db), read_only=True) as con:
        rerun_turns = con.execute("SELECT sum(n_steps) FROM episodes WHERE run_id NOT IN "
                                  f"({', '.join('?' * len(kept))})", [v[1] for v in kept.values()]).fetchone()[0]
    assert calls_after == 1 + rerun_turns  # the preflight, then one call per turn still to do, none for kept ones
