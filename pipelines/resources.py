"""Dagster resources: the warehouse file, the ALFWorld data folder and the student base, all configurable."""

from __future__ import annotations

import os

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
