"""A run whose process is gone (its machine or session killed) is marked failed and started again with the same
partition, config and tags; a run whose process lives, or that ran on another host, is left alone, and a run
resumed three times in a row, or that a later run of its partition took over, is not started again."""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import dagster as dg
import pytest
from dagster._core.events import EngineEventData  # what the run worker records its pid with

from pipelines.definitions import defs
from pipelines.instance import write_instance_config
from pipelines.orphans import ATTEMPT_TAG, RESUME_TAG
from pipelines.partitions import MODEL_VERSION_PARTITIONS_NAME
from pipelines.sensors import orphaned_run_sensor

LATER: list[subprocess.Popen[bytes]] = []
"""Processes started after a run's start (their ids stand for a reused one); ended with each test."""
CONFIG = {"ops": {"student_evaluation": {"config": {"splits": ["dev"], "limit": 3}}}}


@pytest.fixture
def instance(tmp_path: Path) -> Iterator[dg.DagsterInstance]:
    write_instance_config(tmp_path)  # the default run launcher, as `evoharness init` leaves it
    with dg.DagsterInstance.from_config(str(tmp_path)) as instance:
        instance.add_dynamic_partitions(MODEL_VERSION_PARTITIONS_NAME, ["v1", "v2", "v3", "v4"])
        yield instance
    while LATER:
        LATER.pop().kill()


def _started_run(instance: dg.DagsterInstance, pid_of: int | None = None, partition: str = "v1",
                 **tags: str) -> dg.DagsterRun:
    """An evaluate_student run in STARTED whose worker is process ``pid_of`` (spawned after the start when None)."""
    run = instance.create_run_for_job(job_def=defs.resolve_job_def("evaluate_student"), run_config=CONFIG,
                                      tags={"dagster/partition": partition, "model_version": partition, **tags})
    instance.report_dagster_event(dg.DagsterEvent(event_type_value=dg.DagsterEventType.RUN_START.value,
                                                  job_name=run.job_name), run.run_id)
    if pid_of is None:
        time.sleep(1.5)
        LATER.append(subprocess.Popen(["sleep", "60"]))
        pid_of = LATER[-1].pid
    instance.report_engine_event("Executing steps in process", run,
                                 EngineEventData(metadata={"pid": dg.MetadataValue.text(str(pid_of))}))
    return run


def _dead_pid() -> int:
    process = subprocess.Popen(["true"])
    process.wait()
    return process.pid


def _failure(instance: dg.DagsterInstance, run_id: str) -> str:
    event = instance.all_logs(run_id, of_type=dg.DagsterEventType.RUN_FAILURE)[0].dagster_event
    assert event is not None
    return str(event.message)


def _tick(instance: dg.DagsterInstance) -> dg.SensorResult:
    return orphaned_run_sensor(dg.build_sensor_context(instance=instance, definitions=defs))


def test_a_run_without_its_process_is_failed_and_started_again(instance: dg.DagsterInstance) -> None:
    gone, reused = _started_run(instance, _dead_pid()), _started_run(instance, partition="v2")
    alive = _started_run(instance, os.getpid(), partition="v3")
    elsewhere = _started_run(instance, _dead_pid(), partition="v4",
                             **{".dagster/grpc_info": '{"host": "build-7", "port": 4000}'})
    deleted = _started_run(instance, _dead_pid(), partition="v0")  # a version no longer in the partitions
    result = _tick(instance)
    assert instance.get_run_by_id(elsewhere.run_id).status is dg.DagsterRunStatus.STARTED  # another host's run
    assert instance.get_run_by_id(deleted.run_id).status is dg.DagsterRunStatus.STARTED
    assert {r.tags[RESUME_TAG] for r in result.run_requests} == {gone.run_id, reused.run_id}
    for request, partition in zip(sorted(result.run_requests, key=lambda r: r.tags["model_version"]), ["v1", "v2"],
                                  strict=True):
        assert (request.job_name, request.partition_key, request.run_config) == ("evaluate_student", partition, CONFIG)
        assert request.tags["model_version"] == partition and request.tags[ATTEMPT_TAG] == "1"
        assert request.run_key == f"resume:{request.tags[RESUME_TAG]}"
    statuses = {run_id: instance.get_run_by_id(run_id).status for run_id in (gone.run_id, reused.run_id, alive.run_id)}
    assert statuses == {gone.run_id: dg.DagsterRunStatus.FAILURE, reused.run_id: dg.DagsterRunStatus.FAILURE,
                        alive.run_id: dg.DagsterRunStatus.STARTED}
    message = _failure(instance, reused.run_id)
    assert "a later process" in message and "started again" in message
    assert _tick(instance).run_requests == []  # failed now: not requested twice


def test_a_run_resumed_three_times_is_left_failed(instance: dg.DagsterInstance) -> None:
    run = _started_run(instance, _dead_pid(), **{ATTEMPT_TAG: "3"})
    assert _tick(instance).run_requests == []
    assert instance.get_run_by_id(run.run_id).status is dg.DagsterRunStatus.FAILURE
    assert "resumed 3 times" in _failure(instance, run.run_id)


def test_a_run_a_later_run_of_its_partition_took_over_is_left_failed(instance: dg.DagsterInstance) -> None:
    """An orphan from long ago whose partition was run again since (and succeeded) is not started once more."""
    orphan = _started_run(instance, _dead_pid())
    later = _started_run(instance, os.getpid())
    assert _tick(instance).run_requests == []
    assert instance.get_run_by_id(orphan.run_id).status is dg.DagsterRunStatus.FAILURE
    assert f"run {later.run_id} came after it" in _failure(instance, orphan.run_id)


def test_a_run_a_shutdown_interrupted_is_started_again_once(instance: dg.DagsterInstance) -> None:
    """SIGTERM at a shutdown: Dagster fails the run as an unexpected termination (not an orphan: its status is no
    longer STARTED). It is started again like an orphan, and not again once its resumption exists; a run that failed
    in a step is not."""
    interrupted = _started_run(instance, os.getpid())
    instance.add_run_tags(interrupted.run_id, {"dagster/failure_reason": "UNEXPECTED_TERMINATION"})
    instance.report_run_failed(instance.get_run_by_id(interrupted.run_id), "interrupted")
    broken = _started_run(instance, os.getpid(), partition="v2")
    instance.add_run_tags(broken.run_id, {"dagster/failure_reason": "STEP_FAILURE"})
    instance.report_run_failed(instance.get_run_by_id(broken.run_id), "a step failed")
    requests = _tick(instance).run_requests
    assert [(r.tags[RESUME_TAG], r.partition_key, r.tags[ATTEMPT_TAG]) for r in requests] == \
        [(interrupted.run_id, "v1", "1")]
    _started_run(instance, os.getpid(), **requests[0].tags)  # the resumption, launched
    assert _tick(instance).run_requests == []
