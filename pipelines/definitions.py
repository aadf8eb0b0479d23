"""The Dagster code location: ``dagster asset materialize -m pipelines.definitions ...``."""

from __future__ import annotations

import dagster as dg

import assets.consolidation
import assets.curation
import assets.episodes
import assets.evaluation
import assets.games
import assets.relabelling
import assets.training
from pipelines.resources import AlfworldResource, StudentResource, TrainingLauncher, WarehouseResource
from pipelines.sensors import (
    distill_teacher_job,
    evaluate_student_job,
    new_model_version_sensor,
    new_teacher_sensor,
    orphaned_run_sensor,
)

ASSET_MODULES = [assets.games, assets.episodes, assets.consolidation, assets.curation, assets.training,
                 assets.relabelling, assets.evaluation]

defs = dg.Definitions(
    assets=dg.load_assets_from_modules(ASSET_MODULES),
    asset_checks=dg.load_asset_checks_from_modules(ASSET_MODULES),
    resources={"warehouse": WarehouseResource(), "alfworld": AlfworldResource(), "students": StudentResource(),
               "training": TrainingLauncher(), "pipes_client": dg.PipesSubprocessClient()},
    jobs=[distill_teacher_job, evaluate_student_job],
    sensors=[new_teacher_sensor, new_model_version_sensor, orphaned_run_sensor],
)
