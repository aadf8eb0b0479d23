"""Consolidation runs while a collection is writing to the same warehouse (collection never waits on it)."""

import subprocess
import sys
import time
from pathlib import Path

from evoharness.consolidation.config import ConsolidationConfig
from evoharness.consolidation.pipeline import consolidate
from evoharness.consolidation.rules import RuleConsolidator
from evoharness.testing.alfworld_player import WalkthroughPlayer
from evoharness.testing.loopback import LoopbackServer
from evoharness.testing.serve import Delayed
from evoharness.testing.teachers import loopback_teacher, write_registry
from tests.conftest import subprocess_env
from tests.test_consolidation import make_episodes
from warehouse import Warehouse


def test_consolidation_runs_while_another_teacher_collects(tmp_path: Path, alfworld_data: Path) -> None:
    db = tmp_path / "w.duckdb"
    make_episodes(db, games=3)
    player = Delayed(WalkthroughPlayer.for_split("valid_seen", limit=6), delay_s=0.4)
    with LoopbackServer(player) as server:
        registry = write_registry(tmp_path / "teachers.yaml",
                                  loopback_teacher("slow", "openai_compatible", server, api_key_env=None))
        env = subprocess_env() | {"EVOHARNESS_DB": str(db), "EVOHARNESS_TEACHERS": str(registry),
                            "ALFWORLD_DATA": str(alfworld_data)}
        collection = subprocess.Popen(
            [sys.executable, "-m", "evoharness_cli", "collect", "--teacher", "slow", "--split", "valid_seen",
             "--limit", "6", "--concurrency", "2"],
            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )
        try:
            while not server.calls:  # wait until the collection is under way
                assert collection.poll() is None, collection.communicate()
                time.sleep(0.2)
            result = consolidate(ConsolidationConfig(engine="fast", workers=0), db, RuleConsolidator(), "c")
            still_collecting = collection.poll() is None
            out, err = collection.communicate(timeout=300)
        finally:
            if collection.poll() is None:
                collection.kill()
    assert collection.returncode == 0, err
    assert "planned 6, already stored 0, ran 6" in out
    assert result.planned == 6 and result.failed == 0
    assert still_collecting  # consolidation finished while the other teacher's collection was writing
    with Warehouse(db, read_only=True) as wh:
        assert wh.con.execute("SELECT count(*) FROM episodes WHERE teacher = 'slow'").fetchone()[0] == 6
        assert wh.con.execute("SELECT count(*) FROM consolidated_episodes WHERE status = 'ok'").fetchone()[0] == 6
