"""Dagster resources: the warehouse file, the ALFWorld data folder, the training recipe and the training launcher."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import dagster as dg

from evoharness.envs.alfworld.catalog import GameCatalog
from evoharness.training.model_versions import TrainingJob
from evoharness.training.realize import child_command, child_env, job_files, read_result
from evoharness.training.recipes import DEFAULT_RECIPE
from warehouse import Warehouse, default_db_path


class WarehouseResource(dg.ConfigurableResource):
    """The DuckDB warehouse (the one writer path). ``path`` defaults to ``$EVOHARNESS_DB``."""

    path: str = ""

    def db_path(self) -> str:
        return self.path or str(default_db_path())

    def open(self) -> Warehouse:
        return Warehouse(self.db_path())

    def model_versions(self, lock_wait_s: float = 10.0) -> dict[str, list[str]]:
        """Every trained model version with the recipe overrides it trained with, oldest first (read-only; empty
        before the warehouse exists)."""
        path = self.db_path()
        if not os.path.exists(path):
            return {}
        with Warehouse(path, read_only=True, lock_wait_s=lock_wait_s) as wh:
            return {version: json.loads(overrides or "[]")
                    for version, overrides in wh.query("model_versions_by_creation")[1]}


class AlfworldResource(dg.ConfigurableResource):
    """The ALFWorld data folder. ``data_root`` defaults to ``$ALFWORLD_DATA``."""

    data_root: str = ""

    def root(self) -> str | None:
        return self.data_root or os.environ.get("ALFWORLD_DATA")

    def catalog(self) -> GameCatalog:
        return GameCatalog(self.root())


class StudentResource(dg.ConfigurableResource):
    """How students are trained and where they are saved. ``recipe``: a recipe name or path (``configs/recipes``;
    default ``$EVOHARNESS_RECIPE``, else ``small``, the recipe that makes a student that plays on a CPU machine;
    the demo and the tests choose ``tiny``). ``models_dir`` defaults to ``<warehouse folder>/models``."""

    recipe: str = ""
    models_dir: str = ""

    def recipe_name(self) -> str:
        return self.recipe or os.environ.get("EVOHARNESS_RECIPE", DEFAULT_RECIPE)

    def models_root(self, warehouse: Warehouse) -> str:
        return self.models_dir or str(warehouse.path.parent / "models")


class TrainingLauncher(dg.ConfigurableResource):
    """Runs a training job in a child process through Dagster Pipes (the child entry point
    :mod:`evoharness.training.job_runner`), so the Dagster process never imports torch. ``launch_command`` starts
    Python in the child: empty for this interpreter, or e.g. ``accelerate launch --config_file
    configs/accelerate/multi_cpu.yaml`` for two CPU processes (``$EVOHARNESS_TRAIN_LAUNCH`` when unset). The Pipes
    client is the ``pipes_client`` resource: a ``PipesSubprocessClient`` here; a Kubernetes or cloud Pipes client is
    a swap of that resource."""

    launch_command: str = ""

    def runner(self, context: dg.AssetExecutionContext, pipes_client: Any) -> PipesRunner:
        launch = self.launch_command or os.environ.get("EVOHARNESS_TRAIN_LAUNCH", "")
        return PipesRunner(context, pipes_client, launch)


class PipesRunner:
    """A :class:`~evoharness.training.realize.JobRunner` that trains in the child through Dagster Pipes: its
    progress appears in the run's log, its result is read from the file the child wrote."""

    def __init__(self, context: dg.AssetExecutionContext, pipes_client: Any, launch_command: str) -> None:
        self.context, self.pipes_client, self.launch_command = context, pipes_client, launch_command

    def run(self, job: TrainingJob) -> dict[str, Any]:
        job_file, result_file = job_files(job)
        self.pipes_client.run(context=self.context, command=child_command(self.launch_command, job_file, result_file),
                              env=child_env(), cwd=str(Path(__file__).resolve().parents[1]),
                              extras={"model_version": job.model_version})
        return read_result(result_file, job)
