"""Runs whose process is gone: a run worker killed with its machine, its session or by the OOM killer stays STARTED
for ever under Dagster's default run launcher, which has no run monitoring (Dagster's own monitoring covers the
container launchers only). :func:`orphan_reason` tells such a run by the process id its first engine event
recorded: the process is gone, or the id now belongs to a process that started after the run did. Only runs of
this machine are told so: launched through a code server on this host, or, without one, kept in a local (SQLite)
instance; a run on another host is left to that host's sensor. A run whose process was stopped by a signal it could
handle (SIGTERM at a shutdown) is not an orphan: Dagster marks it failed by an interrupt, and it is started again
the same way (:func:`terminated_resumption`)."""

from __future__ import annotations

import json
import os
import socket
from pathlib import Path

import dagster as dg
from dagster._core.storage.runs import SqliteRunStorage

MAX_RESUMES = 3
"""A run is started again at most this many times in a row (a run the OOM killer ends every time is left failed)."""
RESUME_TAG = "evoharness/resume_of"
ATTEMPT_TAG = "evoharness/resume_attempt"


def worker_pid(instance: dg.DagsterInstance, run_id: str) -> int | None:
    """The process id of the run's worker: the ``pid`` of its first engine event that has one."""
    for entry in instance.all_logs(run_id, of_type=dg.DagsterEventType.ENGINE_EVENT):
        data = entry.dagster_event.event_specific_data if entry.dagster_event else None
        pid = (getattr(data, "metadata", None) or {}).get("pid")
        if pid is not None:
            return int(str(getattr(pid, "value", pid)))
    return None


def process_started_at(pid: int) -> float | None:
    """When process ``pid`` started (Unix time), or None when there is none. Without ``/proc``, a live process
    counts as started at time 0 (its id is then trusted)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return None
    except PermissionError:  # alive, someone else's
        pass
    stat, boot = Path(f"/proc/{pid}/stat"), Path("/proc/stat")
    if not stat.exists():
        return 0.0
    ticks = int(stat.read_text().rsplit(")", 1)[1].split()[19])  # field 22, after the command's parentheses
    booted = next(float(line.split()[1]) for line in boot.read_text().splitlines() if line.startswith("btime"))
    return booted + ticks / os.sysconf("SC_CLK_TCK")


def on_this_host(instance: dg.DagsterInstance, run: dg.DagsterRun) -> bool:
    """Whether ``run``'s process ran on this machine: its code server is local, or (a run executed in process,
    without one) its instance keeps runs in a local SQLite file."""
    server = json.loads(run.tags.get(".dagster/grpc_info", "{}"))
    if server:
        return server.get("host") in ("localhost", "127.0.0.1", socket.gethostname())
    return isinstance(instance.run_storage, SqliteRunStorage)


def orphan_reason(instance: dg.DagsterInstance, run: dg.DagsterRun) -> str | None:
    """Why ``run`` (STARTED) has no process any more, or None while it has one or cannot be told (another
    launcher, or no recorded process id)."""
    if run.status is not dg.DagsterRunStatus.STARTED or not isinstance(instance.run_launcher, dg.DefaultRunLauncher) \
            or not on_this_host(instance, run):
        return None
    pid = worker_pid(instance, run.run_id)
    record = instance.get_run_record_by_id(run.run_id)
    if pid is None or record is None or record.start_time is None:
        return None
    started = process_started_at(pid)
    if started is None:
        return f"its process {pid} is gone"
    if started > record.start_time + 1.0:  # /proc's start time has clock-tick resolution
        return f"its process {pid} is gone (the id now belongs to a later process)"
    return None


def later_runs(instance: dg.DagsterInstance, run: dg.DagsterRun) -> list[dg.DagsterRun]:
    """Runs of the same job and partition created after ``run`` (one is enough: it took over, so an orphan that
    has one is not started again)."""
    record = instance.get_run_record_by_id(run.run_id)
    if record is None:
        return []
    found = instance.get_runs(dg.RunsFilter(job_name=run.job_name, created_after=record.create_timestamp,
                                            tags={"dagster/partition": run.tags.get("dagster/partition", "")}), limit=2)
    return [r for r in found if r.run_id != run.run_id][:1]


def resume_request(run: dg.DagsterRun) -> dg.RunRequest | None:
    """The run again (same job, partition, config and tags; every stage resumes what is stored), or None after
    :data:`MAX_RESUMES` resumes in a row."""
    attempt = int(run.tags.get(ATTEMPT_TAG, "0")) + 1
    if attempt > MAX_RESUMES:
        return None
    tags = {k: v for k, v in run.tags.items() if not k.startswith(("dagster/", ".dagster/"))}
    return dg.RunRequest(job_name=run.job_name, partition_key=run.tags.get("dagster/partition"),
                         run_config=run.run_config, run_key=f"resume:{run.run_id}",
                         tags=tags | {RESUME_TAG: run.run_id, ATTEMPT_TAG: str(attempt)})


TERMINATED = {"dagster/failure_reason": "UNEXPECTED_TERMINATION"}
"""The tag Dagster gives a run whose process was interrupted by a signal (SIGTERM or SIGINT at a machine's or
session's shutdown) with no user's termination request; a user's termination cancels a run instead."""


def terminated_resumption(instance: dg.DagsterInstance, run: dg.DagsterRun) -> dg.RunRequest | None:
    """A run failed by an interrupt (:data:`TERMINATED`) is started again like an orphan, unless a later run of its
    partition exists (its resumption, or a run that took over) or it was resumed :data:`MAX_RESUMES` times."""
    return None if later_runs(instance, run) else resume_request(run)


def settle_orphan(instance: dg.DagsterInstance, run: dg.DagsterRun, reason: str) -> dg.RunRequest | None:
    """Mark the orphan ``run`` failed, saying why and what follows; its resumption, unless a later run of its
    partition took over or it was resumed :data:`MAX_RESUMES` times in a row."""
    newer = later_runs(instance, run)
    request = None if newer else resume_request(run)
    if newer:
        follows = f"not started again: run {newer[0].run_id} came after it"
    elif request is None:
        follows = (f"not started again: it was resumed {MAX_RESUMES} times in a row; rerun it by hand once its cause "
                   "is fixed")
    else:
        follows = "started again"
    instance.report_run_failed(run, f"{reason}; {follows}")
    return request
