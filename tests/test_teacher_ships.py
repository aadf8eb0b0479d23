"""A teacher ships, end to end: a trained student served by the engine server (``evoharness serve``'s default) over
HTTP is registered as an ``openai_compatible`` teacher with ``--structured-outputs vllm --auto-distill
--max-spend-usd``; the sensor preflights it and requests
``distill_teacher``, which collects its train episodes through the real ``openai`` SDK, keeps its successes, trains
the ``tiny`` recipe (SFT, the curriculum, GRPO), and the new versions' evaluations read beside the teacher in
``policy_evaluation`` (slow: a few minutes; it needs the `serve` extra).

The served teacher is a 0.1M student that memorised the expert's turns on the first train game (it wins that game
when served; the distillation plays that one game) and the answer to the preflight's example turn: a student this
small plays back what it memorised and nothing else, and the preflight rightly refuses a teacher that cannot answer
its example in the turn format.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import dagster as dg
import duckdb
import pytest

from evoharness.serving import (
    ServedModel,
    ServeSettings,
    ServingError,
    missing_serve_modules,
    serve_command,
    serve_env,
)
from tests.conftest import OVERFIT_SETTINGS, tiny_sft_settings, write_recipe

needs_serve = pytest.mark.skipif(bool(missing_serve_modules()), reason=(
    f"the engine server needs {', '.join(missing_serve_modules())}: pip install -e '.[serve]'"))

TEACHER = "served-student"
HELD_OUT = {"limit": 1, "max_steps": 6, "max_tokens": 48}
"""The evaluation of the teacher and of its students: the first game of each held-out split, a short budget."""
STUDENT_PROMPTS = str(OVERFIT_SETTINGS["prompt_set"])
"""The compact student rendering the served student was trained in: the teacher is registered with it."""


def with_preflight_answer(dataset_path: str, output: Path) -> Path:
    """The curated dataset plus one example: the preflight's example turn (rendered by the student's prompt set),
    answered with the dataset's first turn."""
    import datasets

    from evoharness.artifacts import atomic_folder, load_dataset_folder
    from evoharness.harness.prompts import Mode
    from evoharness.teachers.preflight import preflight_prompt
    from evoharness.teachers.registry import Provider, TeacherSpec

    loaded = load_dataset_folder(dataset_path)
    first = loaded["train"][0]
    spec = TeacherSpec(name="probe", provider=Provider.LOCAL_HF, model="probe",
                       prompt_template=STUDENT_PROMPTS)
    prompt = preflight_prompt(spec, Mode.BPE)
    extra = first | {"episode_id": "preflight-example", "game_id": "preflight", "turn": "0",
                     "messages": [*prompt.messages(), first["messages"][-1]],
                     "turn_vars": json.dumps(prompt.turn_vars, default=str)}
    train = datasets.concatenate_datasets([loaded["train"], datasets.Dataset.from_list([extra],
                                                                                         features=loaded["train"].features)])
    with atomic_folder(output, "dataset") as folder:
        datasets.DatasetDict({"train": train}).save_to_disk(str(folder))
    return output


def test_serving_refuses_a_folder_without_a_model(tmp_path: Path) -> None:
    with pytest.raises(ServingError, match="no config.json"):
        ServedModel(tmp_path).start()


def test_serving_batches_requests_in_flight_in_a_sized_cache_unless_told_not_to() -> None:
    command = serve_command("m", "127.0.0.1", 8000, ServeSettings(server="transformers", kv_cache_tokens=1000))
    assert "--continuous-batching" in command
    assert command[command.index("--cb-num-blocks") + 1] == "4"  # 1,000 tokens in pages of 256, not the free RAM
    plain = serve_command("m", "127.0.0.1", 8000, ServeSettings(server="transformers", continuous_batching=False))
    assert "--continuous-batching" not in plain and "--cb-num-blocks" not in plain
    engine = serve_command("m", "127.0.0.1", 8000, ServeSettings(max_batch=8))  # the default server
    assert engine[1:3] == ["-m", "evoharness.engine_server"] and engine[engine.index("--max-batch") + 1] == "8"


def test_the_server_runs_the_threads_it_is_given_else_the_caller_s(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    assert serve_env(ServeSettings(threads=2))["OMP_NUM_THREADS"] == "2"
    assert serve_env(ServeSettings())["OMP_NUM_THREADS"] == "1"


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory, alfworld_data: Path) -> Iterator[ServedModel]:
    """The overfit student (the ``overfit`` fixture's recipe, plus the preflight answer) behind the engine server on
    a free loopback port."""
    from evoharness.collection import CollectionConfig, collect
    from evoharness.consolidation.config import ConsolidationConfig
    from evoharness.consolidation.pipeline import consolidate
    from evoharness.consolidation.rules import RuleConsolidator
    from evoharness.curation.build import curate
    from evoharness.curation.config import CurationConfig
    from evoharness.training.sft import train_sft
    from warehouse import Warehouse

    folder = tmp_path_factory.mktemp("served")
    db = folder / "w.duckdb"
    with Warehouse(db) as wh:
        collect(CollectionConfig(split="train", limit=1, engine="fast", workers=0, data_root=str(alfworld_data)),
                wh, "t")
    consolidate(ConsolidationConfig(engine="fast", workers=0), db, RuleConsolidator(), "t")
    with Warehouse(db) as wh:
        dataset = curate(wh, CurationConfig(output_dir=str(folder / "datasets"), validation_fraction=0.0), "t")
    examples = with_preflight_answer(dataset.path, folder / "with_preflight")
    train_sft(str(examples), folder / "student", tiny_sft_settings(**OVERFIT_SETTINGS))
    with ServedModel(folder / "student" / "model", ServeSettings(startup_timeout_s=900.0)) as server:
        yield server


@pytest.mark.slow
@needs_serve
def test_a_served_student_ships_as_a_teacher(served: ServedModel, tmp_path: Path, alfworld_data: Path,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    from typer.testing import CliRunner

    from evoharness.collection import CollectionConfig, collect
    from evoharness_cli.cli import app
    from pipelines.definitions import defs
    from pipelines.partitions import TEACHER_PARTITIONS_NAME
    from pipelines.sensors import new_model_version_sensor, new_teacher_sensor
    from warehouse import Warehouse

    db = tmp_path / "warehouse.duckdb"
    monkeypatch.setenv("EVOHARNESS_DB", str(db))
    monkeypatch.setenv("EVOHARNESS_TEACHERS", str(tmp_path / "teachers.yaml"))
    monkeypatch.setenv("ALFWORLD_DATA", str(alfworld_data))
    monkeypatch.setenv("EVOHARNESS_RECIPE", str(write_recipe(  # the tiny recipe, shortened
        tmp_path, sft={"max_steps": 20, "max_length": 1024}, curriculum={"limit": 1},
        grpo={"games_per_step": 1, "num_generations": 2, "max_steps": 1, "episode_steps": 2, "max_new_tokens": 8})))
    added = CliRunner().invoke(app, [
        "teacher", "add", TEACHER, "--provider", "openai_compatible", "--model", served.model,
        "--base-url", served.base_url, "--price-in", "0", "--price-out", "0", "--max-tokens", "64",
        "--prompt-template", STUDENT_PROMPTS, "--max-concurrency", "2", "--distill-games", "1",
        "--auto-distill", "--max-spend-usd", "1", "--structured-outputs", "vllm"])
    assert added.exit_code == 0, added.output

    with dg.instance_for_test() as instance:
        tick = new_teacher_sensor(dg.build_sensor_context(instance=instance, definitions=defs,
                                                          resources=defs.resources))
        [request] = tick.run_requests  # the expert is not marked --auto-distill
        assert request.partition_key == TEACHER and request.tags["teacher_provider"] == "openai_compatible"
        instance.add_dynamic_partitions(TEACHER_PARTITIONS_NAME, [TEACHER])
        distilled = defs.resolve_job_def("distill_teacher").execute_in_process(
            run_config=request.run_config, instance=instance, partition_key=request.partition_key,
            tags=request.tags)
        assert distilled.success
        materialized = {e.asset_key.to_user_string() for e in distilled.get_asset_materialization_events()}
        assert materialized == {"teacher_episodes", "bpe_examples", "sft_dataset", "sft_student", "relabelled_dataset",
                                "relabelled_student", "grpo_curriculum", "grpo_student"}
        no_rounds = [e.materialization.metadata["dagger"].value for e in distilled.get_asset_materialization_events()
                     if e.asset_key.to_user_string().startswith("relabelled_")]
        assert no_rounds == ["none in the recipe"] * 2  # the recipe has no DAgger round: nothing played or trained
        checks = {c.check_name: c.passed for c in distilled.get_asset_check_evaluations()}
        assert checks and all(checks.values()), checks

        # the teacher on the held-out splits, through the same server, for the side-by-side rows
        with Warehouse(db) as wh:
            for split in ("valid_seen", "valid_unseen"):
                collect(CollectionConfig(teacher=TEACHER, split=split, limit=HELD_OUT["limit"],
                                         max_steps=HELD_OUT["max_steps"]), wh, "held-out")

        evaluations = new_model_version_sensor(dg.build_sensor_context(instance=instance, definitions=defs,
                                                                       resources=defs.resources)).run_requests
        assert len(evaluations) == 2
        for evaluation in evaluations:
            played = defs.resolve_job_def("evaluate_student").execute_in_process(
                run_config={"ops": {"student_evaluation": {"config": HELD_OUT}}}, instance=instance,
                partition_key=evaluation.partition_key)
            assert played.success
        versions = sorted(e.partition_key for e in evaluations)

    with duckdb.connect(str(db), read_only=True) as con:
        episodes = con.execute("SELECT count(*), count(*) FILTER (WHERE won), min(input_tokens), sum(cost_usd) "
                               "FROM episodes WHERE teacher = ? AND split = 'train'", [TEACHER]).fetchone()
        outputs = [r[0] for r in con.execute("SELECT s.raw_output FROM steps s JOIN episodes e USING (episode_id) "
                                             "WHERE e.teacher = ? AND e.split = 'train'", [TEACHER]).fetchall()]
        lineage = con.execute("SELECT m.stage, m.recipe FROM model_versions m JOIN datasets d USING (dataset_id) "
                              "WHERE d.teacher = ? ORDER BY m.stage", [TEACHER]).fetchall()
        side_by_side = con.execute(
            "SELECT policy, split FROM policy_evaluation WHERE task_type = 'ALL' AND max_steps = ? "
            "AND (policy = ? OR distilled_from = ?) ORDER BY 1, 2",
            [HELD_OUT["max_steps"], TEACHER, TEACHER]).fetchall()
    assert episodes[0] == 1 and episodes[1] == 1  # the served student won its train game over HTTP
    assert episodes[2] > 0 and episodes[3] == 0  # token counts from the server's usage; priced at 0
    assert outputs and all("<think>" in o and "</action>" in o for o in outputs), outputs[:2]  # its thoughts too
    assert lineage == [("grpo", "quick"), ("sft", "quick")]
    assert {policy for policy, _ in side_by_side} == {TEACHER, *versions}
    assert len(side_by_side) == 6  # the teacher and both students on valid_seen and valid_unseen
