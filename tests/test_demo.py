"""The README's one-command demo of the whole graph, as a newcomer runs it (slow: a few minutes)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import duckdb
import pytest

pytestmark = pytest.mark.slow
REPO = Path(__file__).resolve().parents[1]


def test_demo_materializes_the_whole_graph(tmp_path: Path, alfworld_data: Path) -> None:
    env = os.environ | {"DAGSTER_HOME": str(tmp_path / "home"), "EVOHARNESS_DB": str(tmp_path / "demo.duckdb"),
                        "ALFWORLD_DATA": str(alfworld_data), "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
    done = subprocess.run([sys.executable, "-m", "pipelines.demo"], check=False, cwd=tmp_path, env=env,
                          capture_output=True,
                          text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "distill_teacher (expert, 24 games → SFT → curriculum → GRPO): ok" in done.stdout
    assert "FAILED" not in done.stdout
    with duckdb.connect(str(tmp_path / "demo.duckdb"), read_only=True) as con:
        stages = con.execute("SELECT stage, count(*) FROM model_versions GROUP BY 1 ORDER BY 1").fetchall()
        evaluated = con.execute("SELECT count(DISTINCT teacher) FROM episodes WHERE split = 'valid_unseen'").fetchone()
    assert stages == [("grpo", 1), ("sft", 1)]
    assert evaluated == (2,)  # both model versions played the held-out games
