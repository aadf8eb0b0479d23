"""Sensors: a newly registered teacher becomes a distillation run; a new model version, an evaluation.

A teacher "is new" when its registry entry (``teachers.yaml``) has no ``teacher_episodes``
materialization. The sensor adds missing partition keys and requests one ``distill_teacher`` run per new
teacher: collection on ``distill_games`` train games, consolidation, curation, SFT and GRPO, each gated by
its blocking checks; the new model versions then become evaluation runs (``new_model_version_sensor``). The
run key carries the entry's sha, so an edited entry is requested again but a failed run is not retried in a
loop (rerun it from the UI; every stage resumes where it stopped).
"""

from __future__ import annotations

import dagster as dg
import duckdb

from evoharness.teachers.registry import TeacherRegistry, TeacherSpec
from pipelines.partitions import (
    MODEL_VERSION_PARTITIONS_NAME,
    TEACHER_PARTITIONS_NAME,
    model_version_partitions,
    teacher_partitions,
)
from pipelines.resources import WarehouseResource

TEACHER_EPISODES = dg.AssetKey("teacher_episodes")

DISTILLATION_ASSETS = (TEACHER_EPISODES, dg.AssetKey("bpe_examples"), dg.AssetKey("sft_dataset"),
                       dg.AssetKey("sft_student"), dg.AssetKey("grpo_student"))

distill_teacher_job = dg.define_asset_job(
    "distill_teacher",
    selection=dg.AssetSelection.assets(*DISTILLATION_ASSETS),
    description="One teacher (the partition) from episodes on train games to a curated dataset, an SFT student "
                "and its GRPO successor (each new model version then gets an evaluation run).",
)


def distillation_run_config(spec: TeacherSpec) -> dict:
    """Run config of a teacher's distillation: its train-game budget, default mode and concurrency bound."""
    collection = {"split": "train", "limit": spec.distill_games, "mode": spec.mode.value,
                  "concurrency": spec.max_concurrency}
    return {"ops": {"teacher_episodes": {"config": collection}}}


@dg.sensor(
    job=distill_teacher_job,
    minimum_interval_seconds=30,
    default_status=dg.DefaultSensorStatus.RUNNING,
    description="Registry entries without teacher_episodes become distillation runs of their partition.",
)
def new_teacher_sensor(context: dg.SensorEvaluationContext) -> dg.SensorResult:
    registry = TeacherRegistry.load()
    known = set(context.instance.get_dynamic_partitions(TEACHER_PARTITIONS_NAME))
    materialized = context.instance.get_materialized_partitions(TEACHER_EPISODES)
    missing = [spec.name for spec in registry if spec.name not in known]
    stale = sorted(known - set(registry.names()))  # the registry is the truth: partitions are derived from it
    requests = [
        dg.RunRequest(
            partition_key=spec.name,
            run_key=f"{spec.name}@{spec.sha256[:16]}",
            run_config=distillation_run_config(spec),
            tags={"teacher": spec.name, "teacher_provider": spec.provider.value},
        )
        for spec in registry
        if spec.name not in materialized
    ]
    if not requests and not missing and not stale:
        return dg.SensorResult(skip_reason="every registered teacher has episodes")
    return dg.SensorResult(
        run_requests=requests,
        dynamic_partitions_requests=([teacher_partitions.build_add_request(missing)] if missing else [])
        + ([teacher_partitions.build_delete_request(stale)] if stale else []),
    )


STUDENT_EVALUATION = dg.AssetKey("student_evaluation")

evaluate_student_job = dg.define_asset_job(
    "evaluate_student",
    selection=dg.AssetSelection.assets(STUDENT_EVALUATION),
    description="Play one model version (the partition) on the evaluation splits.",
)


@dg.sensor(
    job=evaluate_student_job,
    minimum_interval_seconds=30,
    default_status=dg.DefaultSensorStatus.RUNNING,
    description="Model versions without student_evaluation become evaluation runs of their partition.",
)
def new_model_version_sensor(context: dg.SensorEvaluationContext, warehouse: WarehouseResource) -> dg.SensorResult:
    """``model_versions`` is the truth for students: every version there (trained by Dagster or by
    ``evoharness sft``/``grpo``) gets its partition and, until it has one, an evaluation run."""
    try:
        versions = warehouse.model_versions()
    except (OSError, duckdb.Error) as exc:  # no warehouse yet, or a writer holds it past the wait
        return dg.SensorResult(skip_reason=f"warehouse not readable now: {str(exc).splitlines()[0]}")
    known = set(context.instance.get_dynamic_partitions(MODEL_VERSION_PARTITIONS_NAME))
    missing = [version for version in versions if version not in known]
    evaluated = context.instance.get_materialized_partitions(STUDENT_EVALUATION)
    requests = [dg.RunRequest(partition_key=version, run_key=version, tags={"model_version": version})
                for version in versions if version not in evaluated]
    if not requests and not missing:
        return dg.SensorResult(skip_reason="every model version has an evaluation")
    return dg.SensorResult(
        run_requests=requests,
        dynamic_partitions_requests=[model_version_partitions.build_add_request(missing)] if missing else [],
    )
