"""The Dagster code location: ``dagster asset materialize -m pipelines.definitions ...``."""

from __future__ import annotations

import dagster as dg

import assets.episodes
import assets.games
from pipelines.resources import AlfworldResource, WarehouseResource

ASSET_MODULES = [assets.games, assets.episodes]

defs = dg.Definitions(
    assets=dg.load_assets_from_modules(ASSET_MODULES),
    asset_checks=dg.load_asset_checks_from_modules(ASSET_MODULES),
    resources={"warehouse": WarehouseResource(), "alfworld": AlfworldResource()},
)
