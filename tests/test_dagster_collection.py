"""In-process Dagster materialization of the collection assets, with a temporary DAGSTER_HOME and warehouse."""

from pathlib import Path

import dagster as dg
import duckdb
import pytest

from assets.episodes import teacher_episodes, teacher_episodes_integrity
from assets.games import alfworld_games
from evoharness.testing.alfworld_player import WalkthroughPlayer
from evoharness.testing.loopback import Call, LoopbackServer, Reply
from evoharness.testing.teachers import TEST_KEY_ENV, loopback_teacher, write_registry
from pipelines.definitions import defs
from pipelines.partitions import TEACHER_PARTITIONS_NAME, register_teachers
from pipelines.resources import AlfworldResource, WarehouseResource
from tests.conftest import write_recipe


def test_definitions_load() -> None:
    graph = defs.resolve_asset_graph()
    keys = {key.to_user_string() for key in graph.get_all_asset_keys()}
    assert {"alfworld_games", "teacher_episodes"} <= keys


def test_every_step_retries_a_locked_warehouse_and_nothing_else() -> None:
    """Every asset and asset check reads or writes the warehouse, so each may meet another run's lock: each runs under
    ``one_line_failures``, which asks for a retry of that failure alone. None carries a retry policy, which Dagster
    would apply to any error and to an interrupt (a SIGTERM'd run would start its step again instead of stopping)."""
    repo = defs.get_repository_def()
    steps = {node.name: node for job in repo.get_all_jobs() for node in job.graph.node_defs}
    assert {"alfworld_games", "teacher_episodes_teacher_episodes_integrity", "grpo_curriculum"} <= steps.keys()
    assert {name for name, node in steps.items() if node.retry_policy is not None} == set()
    wrapped = {name for name, node in steps.items()
               if node.compute_fn.decorated_fn.__code__.co_filename.endswith(str(Path("assets", "failures.py")))}
    assert wrapped == steps.keys()


def test_materialize_games_and_expert_episodes(tmp_path: Path, alfworld_data: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    home = tmp_path / "dagster_home"
    home.mkdir()
    (home / "dagster.yaml").write_text("telemetry:\n  enabled: false\n")
    monkeypatch.setenv("DAGSTER_HOME", str(home))
    db = tmp_path / "warehouse.duckdb"
    resources = {"warehouse": WarehouseResource(path=str(db)), "alfworld": AlfworldResource(data_root=str(alfworld_data))}
    with dg.DagsterInstance.get() as instance:
        assert register_teachers(instance) == ["expert"]
        assert register_teachers(instance) == []
        assert instance.get_dynamic_partitions(TEACHER_PARTITIONS_NAME) == ["expert"]
        run_config = {"ops": {"teacher_episodes": {"config": {"limit": 2, "workers": 1}}}}
        result = dg.materialize([alfworld_games, teacher_episodes, teacher_episodes_integrity], instance=instance,
                                partition_key="expert", resources=resources, run_config=run_config)
        assert result.success
        materialized = {e.asset_key.to_user_string(): e.materialization.metadata
                        for e in result.get_asset_materialization_events()}
        assert materialized["alfworld_games"]["games"].value == 1174
        episodes_md = materialized["teacher_episodes"]
        assert episodes_md["episodes_written"].value == 2
        assert episodes_md["success_rate"].value == 1.0
        assert "data:image/png;base64," in episodes_md["success_by_task_type"].value
        checks = result.get_asset_check_evaluations()
        assert [(c.check_name, c.passed) for c in checks] == [("teacher_episodes_integrity", True)]

        # a rerun writes nothing new
        again = dg.materialize([teacher_episodes], instance=instance, partition_key="expert",
                               resources=resources, run_config=run_config)
        md = again.get_asset_materialization_events()[0].materialization.metadata
        assert md["episodes_skipped_already_stored"].value == 2 and md["episodes_written"].value == 0
    with duckdb.connect(str(db), read_only=True) as con:
        assert con.execute("SELECT count(*), count(DISTINCT run_id) FROM episodes").fetchone() == (2, 1)
        assert con.execute("SELECT count(*) FROM games").fetchone()[0] == 1174


def test_distill_teacher_job_turns_a_teacher_into_a_dataset(tmp_path: Path, alfworld_data: Path,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """The job the sensor requests runs collection on train games, consolidation, curation, SFT, the recipe's DAgger
    round and GRPO from the DAgger student, each gated by its checks, and leaves three model versions to evaluate."""
    from evoharness.teachers.registry import EXPERT
    from pipelines.sensors import distillation_run_config

    db = tmp_path / "warehouse.duckdb"
    monkeypatch.setenv("EVOHARNESS_DB", str(db))
    monkeypatch.setenv("ALFWORLD_DATA", str(alfworld_data))
    run_config = distillation_run_config(EXPERT.model_copy(update={"distill_games": 6}))
    # the shortest real training, as the deployment's recipe: the full run is tests/test_pipeline_e2e.py (slow)
    monkeypatch.setenv("EVOHARNESS_RECIPE", str(write_recipe(
        tmp_path, sft={"max_steps": 4, "max_length": 1024}, curriculum={"limit": 2},
        relabel={"limit": 1, "max_steps": 4}, dagger={"max_steps": 12, "logging_steps": 1},
        grpo={"games_per_step": 1, "num_generations": 2, "max_steps": 1, "episode_steps": 2, "max_new_tokens": 8})))
    with dg.instance_for_test() as instance:
        register_teachers(instance)
        result = defs.resolve_job_def("distill_teacher").execute_in_process(
            run_config=run_config, instance=instance, partition_key="expert")
        assert len(instance.get_dynamic_partitions("model_version")) == 3
    assert result.success
    materialized = {e.asset_key.to_user_string() for e in result.get_asset_materialization_events()}
    assert materialized == {"teacher_episodes", "bpe_examples", "sft_dataset", "sft_student", "relabelled_dataset",
                            "relabelled_student", "grpo_curriculum", "grpo_student"}
    checks = {c.check_name: c.passed for c in result.get_asset_check_evaluations()}
    assert checks == {"teacher_episodes_integrity": True, "bpe_examples_quality": True,
                      "sft_dataset_no_eval_games": True, "sft_student_learned": True,
                      "relabelled_student_learned": True,
                      "grpo_curriculum_has_games": True, "grpo_rollouts_healthy": True,
                      "grpo_stayed_near_parent": True}
    with duckdb.connect(str(db), read_only=True) as con:
        assert con.execute("SELECT count(*), min(split), max(split) FROM episodes WHERE teacher = 'expert'"
                           ).fetchone() == (6, "train", "train")
        recipe = con.execute("SELECT DISTINCT recipe FROM model_versions").fetchall()
        assert recipe == [("quick",)]  # every version records the recipe that trained them
        chain = con.execute("SELECT stage, parent_version IS NOT NULL FROM model_versions ORDER BY created_at"
                            ).fetchall()
        assert chain == [("sft", False), ("sft", True), ("grpo", True)]  # SFT, its DAgger round, GRPO from that
        dagger, grpo_parent = con.execute(
            "SELECT (SELECT model_version FROM model_versions WHERE stage = 'sft' AND parent_version IS NOT NULL), "
            "(SELECT parent_version FROM model_versions WHERE stage = 'grpo')").fetchone()
        assert grpo_parent == dagger
        lost = con.execute("SELECT count(DISTINCT game_id) FROM episodes WHERE split = 'train' AND teacher <> 'expert' "
                           "AND policy_kind <> 'relabel'").fetchone()[0]
        assert lost == 2  # the curriculum: the DAgger student's play on the first 2 train games
        assert con.execute("SELECT count(*) FROM datasets WHERE teacher = 'expert'").fetchone()[0] == 2  # + relabelled


def test_a_task_type_whose_episodes_all_failed_has_no_success_rate(tmp_path: Path, alfworld_data: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """One game's every call gets a 401: its task type has no finished episode, so it has no rate (not 0) and
    the chart leaves it out; the run's rate counts the finished games only."""
    player = WalkthroughPlayer.for_split("valid_seen", 3, data_root=str(alfworld_data))
    doomed = "look at alarmclock under the desklamp"
    assert doomed in player.plans

    def respond(call: Call) -> Reply:
        return Reply(status=401, text="bad key") if f"Task: {doomed}" in call.prompt else player(call)

    monkeypatch.setenv(TEST_KEY_ENV, "sk-test")
    monkeypatch.setenv("ALFWORLD_DATA", str(alfworld_data))
    with LoopbackServer(respond) as server:
        monkeypatch.setenv("EVOHARNESS_TEACHERS", str(write_registry(tmp_path / "teachers.yaml",
                                                                     loopback_teacher("lb", "openai", server))))
        with dg.instance_for_test() as instance:
            instance.add_dynamic_partitions(TEACHER_PARTITIONS_NAME, ["lb"])
            result = dg.materialize(
                [teacher_episodes], partition_key="lb", instance=instance,
                resources={"warehouse": WarehouseResource(path=str(tmp_path / "wh.duckdb")),
                           "alfworld": AlfworldResource(data_root=str(alfworld_data))},
                run_config={"ops": {"teacher_episodes": {"config": {"split": "valid_seen", "limit": 3,
                                                                    "max_steps": 30}}}})
    assert result.success
    metadata = result.get_asset_materialization_events()[0].materialization.metadata
    assert metadata["episodes_failed"].value == 1
    assert metadata["success_rate"].value == 1.0
    assert "look_at_obj_in_light" in metadata["summary"].value
    assert "data:image/png;base64," in metadata["success_by_task_type"].value
