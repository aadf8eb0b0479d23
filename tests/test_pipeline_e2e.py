"""The whole graph in one Dagster instance: a teacher's distillation run (collection to GRPO) and the
evaluations its new model versions trigger (slow: a few minutes)."""

from __future__ import annotations

from pathlib import Path

import dagster as dg
import duckdb
import pytest

from tests.conftest import write_recipe

pytestmark = pytest.mark.slow


def test_teacher_to_evaluated_students(tmp_path: Path, alfworld_data: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from evoharness.teachers.registry import EXPERT
    from pipelines.definitions import defs
    from pipelines.partitions import register_teachers
    from pipelines.sensors import distillation_run_config, new_model_version_sensor

    db = tmp_path / "warehouse.duckdb"
    monkeypatch.setenv("EVOHARNESS_DB", str(db))
    monkeypatch.setenv("ALFWORLD_DATA", str(alfworld_data))
    with dg.instance_for_test() as instance:
        register_teachers(instance)
        run_config = distillation_run_config(EXPERT.model_copy(update={"distill_games": 12}))
        monkeypatch.setenv("EVOHARNESS_RECIPE", str(write_recipe(
            tmp_path, sft={"epochs": 2}, curriculum={"limit": 4},
            grpo={"games_per_step": 2, "num_generations": 2, "max_steps": 2, "episode_steps": 8,
                  "max_new_tokens": 48})))
        distilled = defs.resolve_job_def("distill_teacher").execute_in_process(
            run_config=run_config, instance=instance, partition_key="expert")
        assert distilled.success
        materialized = {e.asset_key.to_user_string() for e in distilled.get_asset_materialization_events()}
        assert materialized == {"teacher_episodes", "bpe_examples", "sft_dataset", "sft_student", "relabelled_dataset",
                                "relabelled_student", "grpo_curriculum", "grpo_student"}
        no_rounds = [e.materialization.metadata["dagger"].value for e in distilled.get_asset_materialization_events()
                     if e.asset_key.to_user_string().startswith("relabelled_")]
        assert no_rounds == ["none in the recipe"] * 2  # the recipe has no DAgger round: nothing played or trained
        checks = {c.check_name: c.passed for c in distilled.get_asset_check_evaluations()}
        assert all(checks.values()) and {"sft_student_learned", "grpo_rollouts_healthy"} <= set(checks)

        tick = dg.build_sensor_context(instance=instance, definitions=defs, resources=defs.resources)
        requests = new_model_version_sensor(tick).run_requests
        assert len(requests) == 2
        evaluation = defs.resolve_job_def("evaluate_student")
        metadata = {}
        for request in sorted(requests, key=lambda r: "-sft-" not in r.partition_key):  # the parent first
            config = {"ops": {"student_evaluation": {"config": {"limit": 1, "max_steps": 6, "max_tokens": 48}}}}
            played = evaluation.execute_in_process(run_config=config, instance=instance,
                                                   partition_key=request.partition_key)
            assert played.success
            [event] = played.get_asset_materialization_events()
            metadata[request.partition_key.split("-")[1]] = event.materialization.metadata
        assert "against_parent" not in metadata["sft"]  # trained from scratch: no parent to play against
        assert "| valid_unseen | 1 |" in metadata["grpo"]["against_parent"].value  # the same game, game by game
        assert 0 <= metadata["grpo"]["p_against_parent_valid_unseen"].value <= 1
    with duckdb.connect(str(db), read_only=True) as con:
        stages = con.execute("SELECT stage, count(*) FROM model_versions GROUP BY 1 ORDER BY 1").fetchall()
        evaluated = con.execute("SELECT count(DISTINCT policy), count(*) FROM policy_evaluation "
                                "WHERE is_student AND task_type = 'ALL'").fetchone()
        lineage = con.execute("SELECT count(*) FROM model_versions m JOIN datasets d USING (dataset_id) "
                              "WHERE d.teacher = 'expert'").fetchone()[0]
    assert stages == [("grpo", 1), ("sft", 1)]
    assert evaluated == (2, 4)  # both versions on valid_seen and valid_unseen
    assert lineage == 2
