"""Sensors: a newly registered teacher becomes a collection run for its partition.

A teacher "is new" when its registry entry (``teachers.yaml``) has no ``teacher_episodes``
materialization. The sensor adds missing partition keys and requests one run per new teacher; the run
key carries the entry's sha, so an edited entry is requested again but a failed run is not retried in a
loop (rerun it from the UI; collection resumes where it stopped).
"""

from __future__ import annotations

import dagster as dg

from evoharness.teachers.registry import TeacherRegistry, TeacherSpec
from pipelines.partitions import TEACHER_PARTITIONS_NAME, teacher_partitions

TEACHER_EPISODES = dg.AssetKey("teacher_episodes")

collect_teacher_job = dg.define_asset_job(
    "collect_teacher",
    selection=dg.AssetSelection.assets(TEACHER_EPISODES),
    description="Collect one teacher's episodes (the teacher is the partition).",
)


def collection_run_config(spec: TeacherSpec) -> dict:
    """Run config of ``teacher_episodes`` for a teacher: its default mode and concurrency bound."""
    return {"ops": {"teacher_episodes": {"config": {"mode": spec.mode.value, "concurrency": spec.max_concurrency}}}}


@dg.sensor(
    job=collect_teacher_job,
    minimum_interval_seconds=30,
    default_status=dg.DefaultSensorStatus.RUNNING,
    description="Registry entries without teacher_episodes become collection runs of their partition.",
)
def new_teacher_sensor(context: dg.SensorEvaluationContext) -> dg.SensorResult:
    registry = TeacherRegistry.load()
    known = set(context.instance.get_dynamic_partitions(TEACHER_PARTITIONS_NAME))
    materialized = context.instance.get_materialized_partitions(TEACHER_EPISODES)
    missing = [spec.name for spec in registry if spec.name not in known]
    requests = [
        dg.RunRequest(
            partition_key=spec.name,
            run_key=f"{spec.name}@{spec.sha256[:16]}",
            run_config=collection_run_config(spec),
            tags={"teacher": spec.name, "teacher_provider": spec.provider.value},
        )
        for spec in registry
        if spec.name not in materialized
    ]
    if not requests and not missing:
        return dg.SensorResult(skip_reason="every registered teacher has episodes")
    return dg.SensorResult(
        run_requests=requests,
        dynamic_partitions_requests=[teacher_partitions.build_add_request(missing)] if missing else [],
    )
