"""A training recipe run end to end for one teacher, through Dagster or the command line, timed stage by stage and
played on dev and the held-out splits: one row of benchmarks/results/recipes.json.

    ALFWORLD_DATA=../shared/alfworld EVOHARNESS_DB=/work/runs/recipes.duckdb \
        python benchmarks/recipes.py --via dagster --recipe small --teacher expert

``--via dagster`` materializes the ``distill_teacher`` job for the teacher's partition in a Dagster instance
(``$DAGSTER_HOME``, else ``<warehouse folder>/dagster_home``) with the run config the sensor derives from the
teacher's registry entry, none typed by hand (the recipe is
the ``students`` resource's, here ``--recipe`` through ``$EVOHARNESS_RECIPE``), then the ``evaluate_student_job`` of
each new model version. ``--via cli`` runs the same stages as ``evoharness`` commands. Training runs under
``$EVOHARNESS_TRAIN_LAUNCH`` (Dagster) or ``--launch`` (CLI): for two CPU processes set ``ACCELERATE_USE_CPU=true``
and ``accelerate launch --config_file configs/accelerate/multi_cpu.yaml``. Every stage resumes where it stopped, so
rerunning the command after a kill continues the run. Through Dagster, ``wall_seconds`` then add up every attempt
(each run of the job for the teacher or version in the instance's event log, from its first to its last event,
so give each recipe run its own warehouse folder), and ``attempts`` lists them; through the CLI they are of the
last attempt.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import report

from evoharness.training.recipes import DEFAULT_RECIPE, load_recipe
from warehouse import Warehouse, default_db_path

RESULTS = report.RESULTS / "recipes.json"
SPLITS = ("dev", "valid_seen", "valid_unseen")
DISTILL_STEPS = ("teacher_episodes", "bpe_examples", "sft_dataset", "sft_student", "grpo_curriculum", "grpo_student")


def via_dagster(teacher: str) -> tuple[dict[str, str], dict[str, float], list[dict[str, Any]]]:
    """Materialize ``distill_teacher`` for ``teacher``; (model versions by stage, wall seconds by asset over every
    attempt, the attempts)."""
    import dagster as dg

    from evoharness.teachers.registry import TeacherRegistry
    from pipelines.definitions import defs
    from pipelines.partitions import register_teachers
    from pipelines.sensors import distillation_run_config

    config = distillation_run_config(TeacherRegistry.load().get(teacher))
    with dg.DagsterInstance.get() as instance:
        register_teachers(instance, (teacher,))
        result = defs.get_job_def("distill_teacher").execute_in_process(instance=instance, partition_key=teacher,
                                                                       run_config=config)
        seconds, attempts = attempt_seconds(instance, "distill_teacher", teacher)
        versions = {stage: str(result.asset_materializations_for_node(node)[-1].metadata["model_version"].value)
                    for stage, node in (("sft", "sft_student"), ("grpo", "grpo_student"))}
    return versions, seconds, attempts


def attempt_seconds(instance: Any, job: str, partition: str) -> tuple[dict[str, float], list[dict[str, Any]]]:
    """Wall seconds of every run of ``job`` for ``partition`` in the event log, added up: by step (its start to
    its last event: success, failure, or where a killed run stopped) and ``total`` (each run's first to last
    event); and one entry per run (id, status, seconds)."""
    import dagster as dg

    seconds: dict[str, float] = {}
    attempts = []
    records = instance.get_run_records(dg.RunsFilter(job_name=job, tags={"dagster/partition": partition}))
    for record in sorted(records, key=lambda r: r.create_timestamp):
        started: dict[str, float] = {}
        last: dict[str, float] = {}
        times = []
        for entry in instance.all_logs(record.dagster_run.run_id):
            times.append(entry.timestamp)
            event = entry.dagster_event
            if event is None or event.step_key is None:
                continue
            if event.event_type == dg.DagsterEventType.STEP_START:
                started[event.step_key] = entry.timestamp
            last[event.step_key] = entry.timestamp
        for step, start in started.items():
            seconds[step] = round(seconds.get(step, 0.0) + last[step] - start, 1)
        ran = round(max(times) - min(times), 1) if times else 0.0
        attempts.append({"run_id": record.dagster_run.run_id, "status": record.dagster_run.status.value,
                         "seconds": ran})
    seconds["total"] = round(sum(a["seconds"] for a in attempts), 1)
    return seconds, attempts


def evaluate_via_dagster(version: str, splits: list[str]) -> tuple[float, list[dict[str, Any]]]:
    """Play ``version`` on ``splits`` through ``evaluate_student_job``; (wall seconds over every attempt, the
    attempts)."""
    import dagster as dg

    from pipelines.definitions import defs
    from pipelines.partitions import register_model_version

    with dg.DagsterInstance.get() as instance:
        register_model_version(instance, version)
        config = {"ops": {"student_evaluation": {"config": {"splits": splits}}}}
        defs.get_job_def("evaluate_student").execute_in_process(instance=instance, partition_key=version,
                                                               run_config=config)
        seconds, attempts = attempt_seconds(instance, "evaluate_student", version)
    return seconds["total"], attempts


def run(command: list[str]) -> float:
    print("$", " ".join(command), flush=True)
    started = time.perf_counter()
    subprocess.run(command, check=True, env=os.environ | report.this_checkout_env())
    return round(time.perf_counter() - started, 1)


def via_cli(teacher: str, recipe: str, launch: str | None) -> tuple[dict[str, str], dict[str, float]]:
    """The same stages as ``evoharness`` commands; (model versions by stage, wall seconds by stage)."""
    launched = ["--launch", launch] if launch is not None else []
    seconds = {"teacher_episodes": run(["evoharness", "collect", "--teacher", teacher, "--split", "train"]),
               "bpe_examples": run(["evoharness", "consolidate", "--teacher", teacher]),
               "sft_dataset": run(["evoharness", "curate", "--teacher", teacher]),
               "sft_student": run(["evoharness", "sft", "--teacher", teacher, "--recipe", recipe, *launched])}
    sft = newest_version(teacher, "sft")
    seconds["grpo_student"] = run(["evoharness", "grpo", "--parent-version", sft, "--recipe", recipe, *launched])
    return {"sft": sft, "grpo": newest_version(teacher, "grpo")}, seconds


def newest_version(teacher: str, stage: str) -> str:
    with Warehouse(default_db_path(), read_only=True) as wh:
        _, rows = wh.query("newest_model_version", teacher=teacher, stage=stage)
    return str(rows[0][0])


def success(version: str, split: str) -> dict[str, Any] | None:
    """The version's greedy play on a split (episodes, success), from the policy_evaluation view."""
    with Warehouse(default_db_path(), read_only=True) as wh:
        _, rows = wh.query("policy_split_success", policy=version, split=split, max_steps=70)
    return {"episodes": rows[0][0], "success": rows[0][1]} if rows else None


def same_run(row: dict[str, Any]) -> tuple[str, str, str]:
    """What makes two rows one run: the path, the teacher and the versions it trained."""
    return row["via"], row["teacher"], json.dumps(row["model_versions"], sort_keys=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--via", choices=("dagster", "cli"), required=True)
    parser.add_argument("--recipe", default=DEFAULT_RECIPE)
    parser.add_argument("--teacher", default="expert")
    parser.add_argument("--splits", nargs="+", default=list(SPLITS), choices=SPLITS)
    parser.add_argument("--launch", default=None, help="CLI only: train under this launcher (evoharness --launch)")
    args = parser.parse_args()
    recipe = load_recipe(args.recipe)
    os.environ["EVOHARNESS_RECIPE"] = args.recipe
    os.environ.setdefault("DAGSTER_HOME", str(default_db_path().parent / "dagster_home"))
    Path(os.environ["DAGSTER_HOME"]).mkdir(parents=True, exist_ok=True)
    attempts: dict[str, list[dict[str, Any]]] = {}
    if args.via == "dagster":
        versions, seconds, attempts["distill_teacher"] = via_dagster(args.teacher)
    else:
        started = time.perf_counter()
        versions, seconds = via_cli(args.teacher, args.recipe, args.launch)
        seconds["total"] = round(time.perf_counter() - started, 1)
    played: dict[str, Any] = {}
    for stage, version in versions.items():
        if args.via == "dagster":
            seconds[f"evaluate_{stage}"], attempts[f"evaluate_{stage}"] = evaluate_via_dagster(version, args.splits)
        else:
            seconds[f"evaluate_{stage}"] = run(["evoharness", "evaluate", "--model-version", version,
                                                *[part for split in args.splits for part in ("--split", split)]])
        played[stage] = {split: success(version, split) for split in args.splits}
    row = {"recipe": recipe.name, "recipe_sha256": recipe.sha256, "via": args.via, "teacher": args.teacher,
           "model_versions": versions, "precision": "bf16" if recipe.sft.bf16 else "fp32",
           "launch": os.environ.get("EVOHARNESS_TRAIN_LAUNCH") if args.via == "dagster" else args.launch,
           **{split: played["grpo"][split] for split in args.splits}, "sft_student": played["sft"],
           "wall_seconds": seconds, **({"attempts": attempts} if attempts else {}), **report.commit(),
           "command": report.command_line(), "machine": report.machine()}  # the file's own machine is its last writer's
    earlier = json.loads(RESULTS.read_text())["runs"] if RESULTS.is_file() else []
    kept = [r for r in earlier if same_run(r) != same_run(row)]  # a rerun of the same versions replaces its row
    report.write_report(RESULTS, {"command": "python benchmarks/recipes.py --via dagster|cli --recipe NAME",
                                  "runs": [*kept, row]})
    print(json.dumps(row, indent=1))


if __name__ == "__main__":
    sys.exit(main())
