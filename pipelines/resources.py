"""Dagster resources: the warehouse file, the ALFWorld data folder and the student base, all configurable."""

from __future__ import annotations

import os
import shlex
import sys
from pathlib import Path
from typing import Any

import dagster as dg

from evoharness.envs.alfworld.catalog import GameCatalog
from evoharness.training.tiny_student import TINY
from warehouse import Warehouse, default_db_path


class WarehouseResource(dg.ConfigurableResource):
    """The DuckDB warehouse (the one writer path). ``path`` defaults to ``$EVOHARNESS_DB``."""

    path: str = ""

    def db_path(self) -> str:
        return self.path or str(default_db_path())

    def open(self) -> Warehouse:
        return Warehouse(self.db_path())

    def model_versions(self, lock_wait_s: float = 10.0) -> list[str]:
        """Every trained model version, oldest first (read-only; ``[]`` before the warehouse exists)."""
        path = self.db_path()
        if not os.path.exists(path):
            return []
        with Warehouse(path, read_only=True, lock_wait_s=lock_wait_s) as wh:
            return [r[0] for r in wh.con.execute(
                "SELECT model_version FROM model_versions ORDER BY created_at, model_version").fetchall()]


class AlfworldResource(dg.ConfigurableResource):
    """The ALFWorld data folder. ``data_root`` defaults to ``$ALFWORLD_DATA``."""

    data_root: str = ""

    def root(self) -> str | None:
        return self.data_root or os.environ.get("ALFWORLD_DATA")

    def catalog(self) -> GameCatalog:
        return GameCatalog(self.root())


class StudentResource(dg.ConfigurableResource):
    """Where students start and where they are saved. ``base_model``: a hub id (``Qwen/Qwen3-8B``), a local
    folder, or ``tiny`` (built locally; the default, from ``$EVOHARNESS_STUDENT_BASE`` when set).
    ``models_dir`` defaults to ``<warehouse folder>/models``."""

    base_model: str = ""
    models_dir: str = ""

    def base(self) -> str:
        return self.base_model or os.environ.get("EVOHARNESS_STUDENT_BASE", TINY)

    def models_root(self, warehouse: Warehouse) -> str:
        return self.models_dir or str(warehouse.path.parent / "models")


class TrainingLauncher(dg.ConfigurableResource):
    """Runs a training job in a child process through Dagster Pipes (``pipelines/train_child.py``), so the
    Dagster process never imports torch. ``launch_command`` starts Python in the child: empty for this
    interpreter, or e.g. ``accelerate launch --config_file configs/accelerate/zero3.yaml`` for several GPUs
    (``$EVOHARNESS_TRAIN_LAUNCH`` when unset). The Pipes client is the ``pipes_client`` resource: a
    ``PipesSubprocessClient`` here; a Kubernetes or cloud Pipes client is a swap of that resource."""

    launch_command: str = ""

    def command(self, job_file: Path) -> list[str]:
        prefix = shlex.split(self.launch_command or os.environ.get("EVOHARNESS_TRAIN_LAUNCH", "")) or [sys.executable]
        return [*prefix, "-m", "pipelines.train_child", str(job_file)]

    def run(self, context: dg.AssetExecutionContext, pipes_client: Any, job: Any) -> dict[str, Any]:
        """Train ``job`` (a ``TrainingJob``) in the child; the result it reported."""
        folder = Path(job.output_dir)
        folder.mkdir(parents=True, exist_ok=True)
        job_file = folder / "job.json"
        job_file.write_text(job.model_dump_json())
        repo = str(Path(__file__).resolve().parents[1])
        env = {"PYTHONPATH": os.pathsep.join(p for p in (repo, os.environ.get("PYTHONPATH", "")) if p)}
        invocation = pipes_client.run(context=context, command=self.command(job_file), env=env, cwd=repo,
                                      extras={"model_version": job.model_version})
        reported = [m for m in invocation.get_custom_messages()
                    if isinstance(m, dict) and m.get("model_version") == job.model_version]
        if not reported:
            raise RuntimeError(f"the training child of {job.model_version} ended without reporting a result")
        return dict(reported[-1]["result"])
