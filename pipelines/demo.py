"""The whole graph in one command, on the ``tiny`` recipe: games → teacher episodes → BPE examples → SFT dataset →
SFT student → its curriculum → GRPO student → an evaluation of each, materialized in a persistent Dagster instance.

    ALFWORLD_DATA=../shared/alfworld python -m pipelines.demo      # then: dagster dev -m pipelines.definitions

It uses ``$DAGSTER_HOME`` (default ``.evoharness/dagster_home``) and ``$EVOHARNESS_DB`` (default
``.evoharness/demo.duckdb``), so the runs, asset checks, metadata tables and plots stay there for the UI.
Rerunning it reuses what exists (episodes, examples, datasets and model versions are keyed by content).
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

DEMO_GAMES = 24
DEMO_TRAINING: dict[str, Any] = {
    "sft_student": {"config": {"epochs": 3}},
    "grpo_student": {"config": {"games_per_step": 2, "num_generations": 2, "max_steps": 2}},
}
DEMO_RECIPE = "tiny"
DEMO_EVALUATION: dict[str, Any] = {"limit": 6, "max_steps": 30, "max_tokens": 96}
QUIET: dict[str, Any] = {"loggers": {"console": {"config": {"log_level": "INFO"}}}}  # progress, not engine events


def _prepare_environment() -> Path:
    home = Path(os.environ.setdefault("DAGSTER_HOME", str(Path(".evoharness/dagster_home").resolve())))
    home.mkdir(parents=True, exist_ok=True)
    if not (home / "dagster.yaml").exists():
        (home / "dagster.yaml").write_text("telemetry:\n  enabled: false\n")
    os.environ.setdefault("EVOHARNESS_DB", str(Path(".evoharness/demo.duckdb").resolve()))
    os.environ.setdefault("EVOHARNESS_RECIPE", DEMO_RECIPE)  # a demonstration of the graph, not a player
    return home


def main() -> None:
    home = _prepare_environment()
    import dagster as dg

    from evoharness.teachers.registry import EXPERT
    from pipelines.definitions import defs
    from pipelines.partitions import register_teachers
    from pipelines.sensors import distillation_run_config, new_model_version_sensor

    started = time.perf_counter()
    with dg.DagsterInstance.get() as instance:
        register_teachers(instance)
        games = dg.materialize([defs.get_assets_def("alfworld_games")], instance=instance,
                               resources=defs.resources)
        print(f"alfworld_games: {'ok' if games.success else 'FAILED'} ({time.perf_counter() - started:.0f} s)")
        run_config = distillation_run_config(EXPERT.model_copy(update={"distill_games": DEMO_GAMES}))
        run_config["ops"] |= DEMO_TRAINING
        run_config |= QUIET
        distilled = defs.resolve_job_def("distill_teacher").execute_in_process(
            run_config=run_config, instance=instance, partition_key="expert")
        print(f"distill_teacher (expert, {DEMO_GAMES} games → SFT → curriculum → GRPO): "
              f"{'ok' if distilled.success else 'FAILED'} ({time.perf_counter() - started:.0f} s)")
        for check in distilled.get_asset_check_evaluations():
            print(f"  check {check.asset_key.to_user_string()}.{check.check_name}: "
                  f"{'passed' if check.passed else 'FAILED'}")
        sensor = new_model_version_sensor(dg.build_sensor_context(instance=instance, definitions=defs,
                                                                   resources=defs.resources))
        assert isinstance(sensor, dg.SensorResult), sensor
        for request in sensor.run_requests or []:
            config = {"ops": {"student_evaluation": {"config": DEMO_EVALUATION}}} | QUIET
            evaluated = defs.resolve_job_def("evaluate_student").execute_in_process(
                run_config=config, instance=instance, partition_key=request.partition_key)
            print(f"evaluate_student {request.partition_key}: {'ok' if evaluated.success else 'FAILED'} "
                  f"({time.perf_counter() - started:.0f} s)")
    print(f"\nDone in {time.perf_counter() - started:.0f} s. Warehouse: {os.environ['EVOHARNESS_DB']}\n"
          f"See it in the UI: DAGSTER_HOME={home} EVOHARNESS_DB={os.environ['EVOHARNESS_DB']} "
          "dagster dev -m pipelines.definitions")


if __name__ == "__main__":
    main()
