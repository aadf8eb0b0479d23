"""Training through Dagster Pipes: `dagster asset materialize` of sft_student trains in a child process, the
Dagster process never imports torch, and the model version's metadata comes back as before."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PROBE = """
import atexit, json, os, sys
def _record():
    folder = os.environ.get("EVOHARNESS_IMPORT_PROBE")
    if folder:
        with open(os.path.join(folder, f"{os.getpid()}.json"), "w") as f:
            json.dump({"argv": sys.argv, "torch": "torch" in sys.modules, "dagster": "dagster" in sys.modules}, f)
atexit.register(_record)
"""


@pytest.mark.slow
def test_dagster_cli_trains_sft_student_in_a_child_process(curated_db: Path, tmp_path: Path) -> None:
    import dagster as dg

    probe, home = tmp_path / "probe", tmp_path / "dagster_home"
    (tmp_path / "site").mkdir()
    (tmp_path / "site" / "sitecustomize.py").write_text(PROBE)  # records what every Python process imported
    probe.mkdir()
    home.mkdir()
    env = os.environ | {
        "PYTHONPATH": os.pathsep.join([str(REPO), str(tmp_path / "site"), os.environ.get("PYTHONPATH", "")]),
        "DAGSTER_HOME": str(home), "EVOHARNESS_DB": str(curated_db), "EVOHARNESS_IMPORT_PROBE": str(probe),
        "OMP_NUM_THREADS": "1", "EVOHARNESS_RECIPE": "tiny"}
    run = [sys.executable, "-m", "evoharness_cli", "init"]
    done = subprocess.run(run, env=env, cwd=REPO, capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    config = {"ops": {"sft_student": {"config": {"max_steps": 2, "max_length": 1024, "dataset_id": "sft-expert@v1"}}}}
    materialize = [sys.executable, "-m", "dagster", "asset", "materialize", "-m", "pipelines.definitions", "--select",
                   "sft_student", "--partition", "expert", "--config-json", json.dumps(config)]
    done = subprocess.run(materialize, env=env, cwd=REPO, capture_output=True, text=True, timeout=900, check=False)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-5000:]

    processes = [json.loads(p.read_text()) for p in probe.glob("*.json")]
    dagster_side = [p for p in processes if "asset" in p["argv"] and "materialize" in p["argv"]]
    children = [p for p in processes if any("job_runner" in a for a in p["argv"])]
    assert dagster_side and all(p["dagster"] and not p["torch"] for p in dagster_side)  # never imported torch
    assert len(children) == 1 and children[0]["torch"] and not children[0]["dagster"]  # trained there

    with dg.DagsterInstance.from_config(str(home)) as instance:
        event = instance.get_latest_materialization_event(dg.AssetKey("sft_student"))
        assert event is not None and event.asset_materialization is not None
        metadata = event.asset_materialization.metadata
        checks = instance.event_log_storage.get_latest_asset_check_execution_by_key(
            [dg.AssetCheckKey(dg.AssetKey("sft_student"), "sft_student_learned")])
    assert {"model_version", "path", "reused_stored_version", "steps", "parameters", "summary", "train_loss",
            "eval_loss", "loss_curve"} <= set(metadata)
    assert metadata["steps"].value == 2 and Path(metadata["path"].value, "config.json").exists()
    assert "data:image/png;base64," in metadata["loss_curve"].value
    assert len(checks) == 1
    from warehouse import Warehouse

    with Warehouse(curated_db) as wh:
        row = wh.con.execute("SELECT stage, steps FROM model_versions WHERE model_version = ?",
                             [metadata["model_version"].value]).fetchone()
    assert row == ("sft", 2)


@pytest.mark.slow
def test_cli_launches_training_in_two_processes_and_stores_the_version(curated_db: Path) -> None:
    """`evoharness sft --launch 'accelerate launch ...'`: two training processes, the warehouse only here."""
    from typer.testing import CliRunner

    from evoharness_cli.cli import app
    from warehouse import Warehouse

    launch = (f"{sys.executable} -m accelerate.commands.launch --multi_gpu --num_processes 2 --num_machines 1 "
              "--mixed_precision no --dynamo_backend no")
    os.environ["ACCELERATE_USE_CPU"] = "true"  # gloo on CPU (the child inherits it)
    try:
        result = CliRunner().invoke(app, ["sft", "--teacher", "expert", "--recipe", "tiny", "--max-steps", "2",
                                          "--max-length", "1024",
                                          "--launch", launch, "--db", str(curated_db)])
    finally:
        del os.environ["ACCELERATE_USE_CPU"]
    assert result.exit_code == 0, result.output
    with Warehouse(curated_db) as wh:
        rows = wh.con.execute("SELECT stage, steps, path FROM model_versions").fetchall()
    assert len(rows) == 1 and rows[0][:2] == ("sft", 2) and Path(rows[0][2], "model.safetensors").exists()
