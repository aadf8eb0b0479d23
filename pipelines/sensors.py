"""Sensors: a newly registered teacher becomes a distillation run; a new model version, an evaluation.

A teacher "is new" when its registry entry (``teachers.yaml``) has no ``teacher_episodes``
materialization. The sensor adds missing partition keys. Automatic runs are opt-in: only a teacher marked
``auto_distill`` (``evoharness teacher add NAME ... --auto-distill``), under its spend cap, whose preflight
passes (one real call) gets a ``distill_teacher`` run; every other one is named in the skip reason with
why. A run is collection on ``distill_games`` train games, consolidation, curation, SFT, the curriculum and GRPO
(the recipe of the ``students`` resource), each gated by
its blocking checks; the new model versions then become evaluation runs (``new_model_version_sensor``). The
run key carries the entry's sha, so an edited entry is requested again but a failed run is not retried in a
loop (rerun it from the UI; every stage resumes where it stopped). A run whose process is gone (a killed machine
or session) is marked failed and started again by ``orphaned_run_sensor``.
"""

from __future__ import annotations

import json
import time
from typing import Any

import dagster as dg
import duckdb

from evoharness.evaluation.protocol import protocol_splits
from evoharness.teachers.preflight import run_preflight
from evoharness.teachers.registry import TeacherRegistry, TeacherSpec
from pipelines.orphans import TERMINATED, orphan_reason, settle_orphan, terminated_resumption
from pipelines.partitions import (
    MODEL_VERSION_PARTITIONS_NAME,
    TEACHER_PARTITIONS_NAME,
    model_version_partitions,
    teacher_partitions,
)
from pipelines.resources import WarehouseResource
from warehouse import Warehouse, WarehouseOpenError, load_query

TEACHER_EPISODES = dg.AssetKey("teacher_episodes")

DISTILLATION_ASSETS = (TEACHER_EPISODES, dg.AssetKey("bpe_examples"), dg.AssetKey("sft_dataset"),
                       dg.AssetKey("sft_student"), dg.AssetKey("relabelled_dataset"), dg.AssetKey("relabelled_student"),
                       dg.AssetKey("grpo_curriculum"), dg.AssetKey("grpo_student"))

distill_teacher_job = dg.define_asset_job(
    "distill_teacher",
    selection=dg.AssetSelection.assets(*DISTILLATION_ASSETS),
    description="One teacher (the partition) from episodes on train games to a curated dataset, an SFT student, "
                "its DAgger round (where the recipe has one), the curriculum and the GRPO successor, trained as the "
                "students resource's recipe says (each new model version then gets an evaluation run).",
)


def distillation_run_config(spec: TeacherSpec) -> dict:
    """Run config of a teacher's distillation: its train-game budget, default mode and concurrency bound
    (its spend cap is the registry's, enforced by the collection itself)."""
    collection = {"split": "train", "limit": spec.distill_games, "mode": spec.mode.value,
                  "concurrency": spec.max_concurrency}
    return {"ops": {"teacher_episodes": {"config": collection}}}


PREFLIGHT_RETRY_S = 600.0
"""After a failed preflight, a teacher is checked again (one real call) at most this often."""


def spent_usd(warehouse: WarehouseResource, teacher: str) -> float:
    """The teacher's spend over its attempt ledger; 0 before the warehouse exists."""
    try:
        with Warehouse(warehouse.db_path(), read_only=True, lock_wait_s=5.0) as wh:
            return float(wh.scalar(load_query("teacher_spend"), {"teacher": teacher}))
    except WarehouseOpenError as exc:
        if "does not exist" in str(exc):
            return 0.0
        raise


def _run_requested(context: dg.SensorEvaluationContext, run_key: str) -> bool:
    runs = context.instance.get_runs(filters=dg.RunsFilter(tags={"dagster/run_key": run_key}), limit=1)
    return bool(runs)


def distillation_decision(context: dg.SensorEvaluationContext, spec: TeacherSpec, registry: TeacherRegistry,
                          warehouse: WarehouseResource, failed_at: dict[str, float]) -> str | None:
    """None when ``spec`` may get its distillation run now; else why not (one line)."""
    if not spec.auto_distill:
        return (f"{spec.name}: not marked for automatic distillation (opt in with `evoharness teacher add "
                f"{spec.name} ... --auto-distill`, or launch distill_teacher by hand)")
    if spec.max_spend_usd is not None:
        try:
            spent = spent_usd(warehouse, spec.name)
        except WarehouseOpenError as exc:
            return f"{spec.name}: cannot read its spend yet ({exc}); checking again later"
        if spent >= spec.max_spend_usd:
            return (f"{spec.name}: spent ${spent:.4f} of its ${spec.max_spend_usd:g} cap (max_spend_usd); raise "
                    "it to distil more")
    key = f"{spec.name}@{spec.sha256[:16]}"
    if time.time() - failed_at.get(key, 0.0) < PREFLIGHT_RETRY_S:
        return f"{spec.name}: preflight failed recently; next check within {PREFLIGHT_RETRY_S:.0f}s"
    result = run_preflight(spec.name, registry=registry)
    if not result.ok:
        failed_at[key] = time.time()
        return f"{spec.name}: {result.message}"
    context.log.info(result.message)
    return None


@dg.sensor(
    job=distill_teacher_job,
    minimum_interval_seconds=30,
    default_status=dg.DefaultSensorStatus.RUNNING,
    description="Registry entries marked auto_distill, without teacher_episodes, under their spend cap and "
                "with a passing preflight become distillation runs of their partition.",
)
def new_teacher_sensor(context: dg.SensorEvaluationContext, warehouse: WarehouseResource) -> dg.SensorResult:
    registry = TeacherRegistry.load()
    known = set(context.instance.get_dynamic_partitions(TEACHER_PARTITIONS_NAME))
    materialized = context.instance.get_materialized_partitions(TEACHER_EPISODES)
    missing = [spec.name for spec in registry if spec.name not in known]
    stale = sorted(known - set(registry.names()))  # the registry is the truth: partitions are derived from it
    failed_at: dict[str, float] = json.loads(context.cursor) if context.cursor else {}
    requests, skipped = [], []
    for spec in registry:
        run_key = f"{spec.name}@{spec.sha256[:16]}"
        if spec.name in materialized or _run_requested(context, run_key):
            continue
        reason = distillation_decision(context, spec, registry, warehouse, failed_at)
        if reason is not None:
            skipped.append(reason)
            continue
        requests.append(dg.RunRequest(
            partition_key=spec.name,
            run_key=run_key,
            run_config=distillation_run_config(spec),
            tags={"teacher": spec.name, "teacher_provider": spec.provider.value},
        ))
    partitions = (([teacher_partitions.build_add_request(missing)] if missing else [])
                  + ([teacher_partitions.build_delete_request(stale)] if stale else []))
    cursor = json.dumps(failed_at, sort_keys=True)
    if requests:
        for reason in skipped:
            context.log.info(f"skipped {reason}")
        return dg.SensorResult(run_requests=requests, dynamic_partitions_requests=partitions, cursor=cursor)
    why = "; ".join(skipped) or "every registered teacher has episodes or a distillation run"
    return dg.SensorResult(skip_reason=why, dynamic_partitions_requests=partitions, cursor=cursor)


STUDENT_EVALUATION = dg.AssetKey("student_evaluation")

evaluate_student_job = dg.define_asset_job(
    "evaluate_student",
    selection=dg.AssetSelection.assets(STUDENT_EVALUATION),
    description="Play one model version (the partition) on the evaluation splits.",
)


def evaluation_run_config(recipe_overrides: list[str]) -> dict[str, Any]:
    """A new version's evaluation run config: a recipe as shipped (any seed) is final and plays ``dev`` and the
    held-out splits; a variant (a screen) plays ``dev`` only (:func:`~evoharness.evaluation.protocol.protocol_splits`)."""
    return {"ops": {STUDENT_EVALUATION.to_python_identifier(): {"config": {
        "splits": list(protocol_splits(recipe_overrides))}}}}


@dg.sensor(
    job=evaluate_student_job,
    minimum_interval_seconds=30,
    default_status=dg.DefaultSensorStatus.RUNNING,
    description="Model versions without student_evaluation become evaluation runs of their partition: a recipe "
                "as shipped on dev and the held-out splits, a variant (a screen) on dev only.",
)
def new_model_version_sensor(context: dg.SensorEvaluationContext, warehouse: WarehouseResource) -> dg.SensorResult:
    """``model_versions`` is the truth for students: every version there (trained by Dagster or by
    ``evoharness sft``/``grpo``) gets its partition and, until it has one, an evaluation run on the splits of the
    results protocol (:func:`evaluation_run_config`)."""
    try:
        versions = warehouse.model_versions()
    except (OSError, duckdb.Error, WarehouseOpenError) as exc:  # a writer holds it past the wait
        return dg.SensorResult(skip_reason=f"warehouse not readable now: {str(exc).splitlines()[0]}")
    known = set(context.instance.get_dynamic_partitions(MODEL_VERSION_PARTITIONS_NAME))
    missing = [version for version in versions if version not in known]
    evaluated = context.instance.get_materialized_partitions(STUDENT_EVALUATION)
    requests = [dg.RunRequest(partition_key=version, run_key=version, tags={"model_version": version},
                              run_config=evaluation_run_config(overrides))
                for version, overrides in versions.items() if version not in evaluated]
    if not requests and not missing:
        return dg.SensorResult(skip_reason="every model version has an evaluation")
    return dg.SensorResult(
        run_requests=requests,
        dynamic_partitions_requests=[model_version_partitions.build_add_request(missing)] if missing else [],
    )


def _partition_exists(instance: dg.DagsterInstance, partitions: dg.DynamicPartitionsDefinition,
                      run: dg.DagsterRun) -> bool:
    """Whether ``run``'s partition still exists: a run of a deleted one (a teacher taken out of the registry) is left
    as it is."""
    return partitions.has_partition_key(run.tags.get("dagster/partition", ""), dynamic_partitions_store=instance)


@dg.sensor(
    jobs=[distill_teacher_job, evaluate_student_job],
    minimum_interval_seconds=60,
    default_status=dg.DefaultSensorStatus.RUNNING,
    description="A distillation or evaluation run whose process is gone (a killed machine, session or OOM) is "
                "marked failed and started again with the same partition and config, as is one that Dagster failed "
                "because a signal interrupted it (a shutdown); every stage resumes what is stored (at most 3 times "
                "in a row).",
)
def orphaned_run_sensor(context: dg.SensorEvaluationContext) -> dg.SensorResult:
    requests = []
    for job, partitions in ((distill_teacher_job, teacher_partitions), (evaluate_student_job, model_version_partitions)):
        started = context.instance.get_runs(dg.RunsFilter(job_name=job.name, statuses=[dg.DagsterRunStatus.STARTED]))
        for run in started:
            if _partition_exists(context.instance, partitions, run) and \
                    (reason := orphan_reason(context.instance, run)) is not None and \
                    (request := settle_orphan(context.instance, run, reason)) is not None:
                requests.append(request)
        terminated = context.instance.get_runs(dg.RunsFilter(job_name=job.name, statuses=[dg.DagsterRunStatus.FAILURE],
                                                             tags=TERMINATED), limit=20)
        for run in terminated:
            if _partition_exists(context.instance, partitions, run) and \
                    (request := terminated_resumption(context.instance, run)) is not None:
                requests.append(request)
    if not requests:
        return dg.SensorResult(skip_reason="no run has lost its process")
    return dg.SensorResult(run_requests=requests)
