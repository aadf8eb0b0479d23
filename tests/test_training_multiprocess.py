"""GRPO under two processes (accelerate launch, gloo on CPU) against one process on fixed rollouts, and SFT under
two processes: the benchmark command, run end to end."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_two_processes_train_exactly_like_one(tmp_path: Path) -> None:
    env = os.environ | {"PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]),
                        "OMP_NUM_THREADS": "1"}
    output = tmp_path / "result.json"
    done = subprocess.run([sys.executable, str(REPO / "benchmarks" / "grpo_multiprocess.py"), "--workdir",
                           str(tmp_path / "work"), "--output", str(output)], env=env, cwd=REPO,
                          capture_output=True, text=True, timeout=1500, check=False)
    assert output.exists(), done.stdout[-2000:] + done.stderr[-4000:]
    result = json.loads(output.read_text())
    assert result["checks"] == {name: True for name in result["checks"]}, result["checks"]
    assert result["grpo"]["2"]["processes"] == 2 and result["sft"]["processes"] == 2
    assert result["relative_update_gap"] < 1e-4 and done.returncode == 0
