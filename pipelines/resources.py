"""Dagster resources: the warehouse file and the ALFWorld data folder, both configurable."""

from __future__ import annotations

import os

import dagster as dg

from evoharness.envs.alfworld.catalog import GameCatalog
from warehouse import Warehouse, default_db_path


class WarehouseResource(dg.ConfigurableResource):
    """The DuckDB warehouse (the one writer path). ``path`` defaults to ``$EVOHARNESS_DB``."""

    path: str = ""

    def db_path(self) -> str:
        return self.path or str(default_db_path())

    def open(self) -> Warehouse:
        return Warehouse(self.db_path())


class AlfworldResource(dg.ConfigurableResource):
    """The ALFWorld data folder. ``data_root`` defaults to ``$ALFWORLD_DATA``."""

    data_root: str = ""

    def root(self) -> str | None:
        return self.data_root or os.environ.get("ALFWORLD_DATA")

    def catalog(self) -> GameCatalog:
        return GameCatalog(self.root())
