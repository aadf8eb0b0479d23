"""The foundation's acceptance run, end to end through the console script on the real engine."""

import subprocess
import sys
from pathlib import Path

import duckdb
import pytest

from tests.conftest import subprocess_env


@pytest.mark.slow
def test_collect_twice_on_the_real_engine(tmp_path: Path, alfworld_data: Path) -> None:
    db = tmp_path / "acc.duckdb"
    env = subprocess_env() | {"ALFWORLD_DATA": str(alfworld_data), "EVOHARNESS_DB": str(db), "COLUMNS": "200"}
    command = [sys.executable, "-m", "evoharness_cli", "collect", "--teacher", "expert", "--mode", "bpe",
               "--split", "valid_seen", "--limit", "12", "--engine", "textworld"]
    first = subprocess.run(command, env=env, capture_output=True, text=True, timeout=900, check=False)
    assert first.returncode == 0, first.stderr
    assert "planned 12, already stored 0, ran 12" in first.stdout
    second = subprocess.run(command, env=env, capture_output=True, text=True, timeout=300, check=False)
    assert second.returncode == 0, second.stderr
    assert "planned 12, already stored 12, ran 0" in second.stdout
    with duckdb.connect(str(db), read_only=True) as con:
        count, success = con.execute("SELECT count(*), avg(won::INT) FROM episodes WHERE teacher = 'expert'").fetchone()
        assert count == 12 and success >= 0.8
        assert con.execute("SELECT count(*) FROM episodes e WHERE NOT EXISTS "
                           "(SELECT 1 FROM steps s WHERE s.episode_id = e.episode_id)").fetchone()[0] == 0
        kinds = dict(con.execute("SELECT kind, count(*) FROM steps GROUP BY 1").fetchall())
        assert {"env", "track", "commit", "recall", "note"} <= set(kinds)
        assert con.execute("SELECT DISTINCT engine FROM episodes").fetchall() == [("textworld",)]
