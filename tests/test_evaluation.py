"""Evaluation of a student model version: its episodes in the warehouse, beside its teacher; Dagster per version."""

from __future__ import annotations

from pathlib import Path

import dagster as dg
import pytest

from evoharness.collection import CollectionConfig, collect
from evoharness.evaluation.run import NO_REPEAT_SUFFIX, UNCONSTRAINED_SUFFIX, EvaluationConfig, evaluate
from evoharness.training.model_versions import teacher_datasets
from tests.conftest import tiny_sft_settings, train_sft_version
from warehouse import Warehouse

TINY_TRAINING = tiny_sft_settings(max_steps=2, logging_steps=1, max_length=1024)
QUICK = {"splits": ("valid_seen",), "limit": 2, "max_steps": 3, "max_tokens": 16}  # 3 steps: no game is winnable
URL = "http://127.0.0.1:8000/v1"


def test_student_plays_through_the_harness_and_reads_beside_its_teacher(curated_db: Path, tmp_path: Path) -> None:
    with Warehouse(curated_db) as wh:
        version = train_sft_version(wh, teacher_datasets(wh, "expert")[0], TINY_TRAINING, tmp_path, "train")
        first = evaluate(wh, EvaluationConfig(model_version=version.model_version, **QUICK), "eval1")
        episodes = wh.con.execute(
            "SELECT e.split, e.status, e.n_steps, e.bank, p.provider, p.model FROM episodes e "
            "JOIN policies p ON p.policy = e.teacher WHERE e.model_version = ? AND e.policy_kind = 'student' "
            "AND p.policy_kind = 'student'", [version.model_version]).fetchall()
        as_teacher = wh.scalar("SELECT count(*) FROM teachers WHERE name = ?", [version.model_version])
        steps = wh.con.execute("SELECT count(*), count(s.output_tokens) FROM steps s "
                               "JOIN episodes e USING (episode_id) WHERE teacher = ?",
                               [version.model_version]).fetchone()
        bank = wh.scalar("SELECT bank_version FROM datasets WHERE dataset_id = ?", [version.row["dataset_id"]])
        collect(CollectionConfig(split="valid_seen", limit=2, max_steps=3, engine="fast"), wh, "teacher-eval")
        again = evaluate(wh, EvaluationConfig(model_version=version.model_version, **QUICK), "eval2")
        shorter = evaluate(wh, EvaluationConfig(model_version=version.model_version, **(QUICK | {"max_steps": 2})),
                           "eval3")
    assert first.by_split["valid_seen"].written == 2 and again.by_split["valid_seen"].skipped == 2  # resumable
    assert len(episodes) == 2 and as_teacher == 0  # a student is a policy of its own kind, never a teacher row
    for split, status, n_steps, bank_label, provider, model in episodes:
        assert (split, status, n_steps, provider, model) == ("valid_seen", "finished", 3, "local_hf", version.path)
        assert bank_label.endswith(f"@v{bank}")  # recalls from the bank version its dataset recorded
    assert steps == (6, 6)  # every turn generated, with its token count
    assert first.success_rate("valid_seen") == 0.0 and first.success_rate("valid_unseen") is None
    policies = {row[0] for row in again.rows}
    assert policies == {version.model_version, "expert"}  # beside the teacher it was distilled from
    overall = [row for row in again.rows if row[2] == "ALL"]
    assert [(row[0], row[3]) for row in overall] == [(version.model_version, 2), ("expert", 2)]
    # another step budget is another evaluation: never averaged with the first, and no teacher row at that budget
    assert [(row[0], row[3], row[7]) for row in shorter.rows if row[2] == "ALL"] == [(version.model_version, 2, 2.0)]


def test_processes_share_a_splits_games_and_write_what_one_process_would(curated_db: Path, tmp_path: Path) -> None:
    """Two processes play every second game each, into the same warehouse file: each game once, with its progress
    relayed as one count; a one-process rerun then finds every episode stored."""
    quick = QUICK | {"limit": 4}
    with Warehouse(curated_db) as wh:
        version = train_sft_version(wh, teacher_datasets(wh, "expert")[0], TINY_TRAINING, tmp_path, "train")
        seen: list[tuple[int, int]] = []
        shared = evaluate(wh, EvaluationConfig(model_version=version.model_version, processes=2, **quick), "two",
                          on_progress=lambda split, done, total, record: seen.append((done, total)))
        again = evaluate(wh, EvaluationConfig(model_version=version.model_version, **quick), "one")
        stored = wh.con.execute("SELECT count(DISTINCT game_id), count(*), sum(n_steps) FROM episodes "
                                "WHERE teacher = ?", [version.model_version]).fetchone()
    played = shared.by_split["valid_seen"]
    assert (played.planned, played.written, len(played.records)) == (4, 4, 4)
    assert sorted(done for done, _ in seen) == [1, 2, 3, 4] and seen[-1][0] <= 4
    assert again.by_split["valid_seen"].skipped == 4 and again.by_split["valid_seen"].written == 0
    assert stored == (4, 4, 12)


def test_a_local_student_plays_in_a_process_per_core_that_has_games_and_memory_for_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import os

    from evoharness import collection_processes
    from evoharness.collection_processes import local_processes

    cores = len(os.sched_getaffinity(0))
    (tmp_path / "model.safetensors").write_bytes(b"0" * 1000)
    monkeypatch.setattr(collection_processes, "available_memory", lambda: 64 * 2**30)  # whatever else runs here
    assert local_processes(tmp_path, None, 16) == cores  # a whole split, a small model: every core
    assert local_processes(tmp_path, 20, 16) == 1  # fewer than two processes' worth of games
    assert local_processes(tmp_path, 16 * cores, 16) == cores
    with open(tmp_path / "model.safetensors", "r+b") as weights:  # weights larger than the memory (a sparse file)
        weights.truncate(64 * 2**30)
    assert local_processes(tmp_path, None, 16) == 1
    monkeypatch.undo()
    assert collection_processes.available_memory() > 0  # the kernel's MemAvailable, read for real


def test_a_decoding_without_repeats_is_its_own_policy_of_the_same_version(curated_db: Path, tmp_path: Path) -> None:
    with Warehouse(curated_db) as wh:
        version = train_sft_version(wh, teacher_datasets(wh, "expert")[0], TINY_TRAINING, tmp_path, "train")
        greedy = evaluate(wh, EvaluationConfig(model_version=version.model_version, **QUICK), "greedy")
        guarded = evaluate(wh, EvaluationConfig(model_version=version.model_version, avoid_repeats=True, **QUICK),
                           "guarded")
        stored = wh.con.execute("SELECT teacher, model_version, count(*) FROM episodes WHERE policy_kind = 'student' "
                                "GROUP BY ALL ORDER BY teacher").fetchall()
    name = f"{version.model_version}{NO_REPEAT_SUFFIX}"
    assert guarded.policy == name and guarded.by_split["valid_seen"].written == 2  # not resumed from the greedy run
    assert stored == [(version.model_version, version.model_version, 2), (name, version.model_version, 2)]
    assert guarded.success_rate("valid_seen") == 0.0 and greedy.success_rate("valid_seen") == 0.0
    assert {row[0] for row in guarded.rows} == {name}  # its own rows (no teacher evaluated at this budget)
    with pytest.raises(ValueError, match="with serve_url, structured_outputs"):  # a server samples freely
        EvaluationConfig(model_version=version.model_version, avoid_repeats=True, serve_url="http://127.0.0.1:8000/v1")


@pytest.mark.parametrize(("options", "suffix"), [
    ({}, ""),
    ({"serve_url": URL, "structured_outputs": "vllm"}, ""),  # the server holds it to the same grammar
    ({"serve_url": URL}, UNCONSTRAINED_SUFFIX),  # a server without structured outputs samples freely
    ({"constrain_actions": False}, UNCONSTRAINED_SUFFIX),
    ({"serve_url": URL, "structured_outputs": "vllm", "avoid_repeats": True}, NO_REPEAT_SUFFIX),
])
def test_an_unconstrained_decoding_is_its_own_policy(options: dict, suffix: str) -> None:
    config = EvaluationConfig(model_version="expert-sft-x", **options)
    assert config.policy == f"expert-sft-x{suffix}"


def test_unknown_model_version_is_a_clear_error(curated_db: Path) -> None:
    with Warehouse(curated_db) as wh, pytest.raises(LookupError, match="Unknown model version 'nope'"):
        evaluate(wh, EvaluationConfig(model_version="nope"), "r")


def test_cli_trained_version_gets_an_evaluation_run_on_the_next_sensor_tick(curated_db: Path, tmp_path: Path
                                                                            ) -> None:
    """``model_versions`` is the truth for students: a version trained by ``evoharness sft`` (no Dagster run,
    no partition) gets its partition and an evaluation run from the sensor."""
    from typer.testing import CliRunner

    import assets.evaluation as ae
    from evoharness_cli.cli import app
    from pipelines.definitions import defs
    from pipelines.partitions import MODEL_VERSION_PARTITIONS_NAME
    from pipelines.resources import AlfworldResource, WarehouseResource
    from pipelines.sensors import new_model_version_sensor

    trained = CliRunner().invoke(app, ["sft", "--teacher", "expert", "--recipe", "tiny", "--max-steps", "2",
                                       "--max-length", "1024",
                                       "--models-dir", str(tmp_path), "--db", str(curated_db)])
    assert trained.exit_code == 0, trained.output
    assert "dataset: sft-expert@v1 (the teacher's latest" in trained.output
    with Warehouse(curated_db) as wh:
        version, dataset = wh.con.execute("SELECT model_version, dataset_id FROM model_versions").fetchone()
    assert dataset == "sft-expert@v1"

    resources = {"warehouse": WarehouseResource(path=str(curated_db)), "alfworld": AlfworldResource()}
    with dg.instance_for_test() as instance:
        assert instance.get_dynamic_partitions(MODEL_VERSION_PARTITIONS_NAME) == []
        tick = new_model_version_sensor(dg.build_sensor_context(instance=instance, definitions=defs,
                                                                 resources=resources))
        assert [r.partition_key for r in tick.run_requests] == [version]
        # trained with overrides: a screen, played on dev only (the held-out splits are for final versions)
        assert tick.run_requests[0].run_config == {"ops": {"student_evaluation": {"config": {"splits": ["dev"]}}}}
        (added,) = tick.dynamic_partitions_requests
        assert list(added.partition_keys) == [version]
        instance.add_dynamic_partitions(MODEL_VERSION_PARTITIONS_NAME, list(added.partition_keys))

        config = {"splits": ["valid_seen"], "limit": 1, "max_steps": 3, "max_tokens": 16}
        evaluated = dg.materialize([ae.student_evaluation], instance=instance, partition_key=version,
                                   resources=resources,
                                   run_config={"ops": {"student_evaluation": {"config": config}}})
        metadata = evaluated.get_asset_materialization_events()[0].materialization.metadata
        assert metadata["success_rate_valid_seen"].value == 0.0 and "success_rate_valid_unseen" not in metadata
        assert metadata["episodes_written"].value == 1
        assert "data:image/png;base64," in metadata["success_by_task_type"].value
        assert (metadata["model_version"].value, metadata["policy_kind"].value) == (version, "student")
        assert metadata["dataset_id"].value == "sft-expert@v1" and metadata["distilled_from"].value == "expert"
        assert version in metadata["students_of_teacher"].value  # the teacher's students side by side
        assert "student_to_use" not in metadata  # chosen on the whole dev split only, which it has not played
        assert "| all | " in metadata["losses_valid_seen"].value  # where its lost game stopped

        idle = new_model_version_sensor(dg.build_sensor_context(instance=instance, definitions=defs,
                                                                 resources=resources))
        assert not idle.run_requests and not idle.dynamic_partitions_requests


def test_evaluate_against_a_served_model_writes_a_normal_evaluation(curated_db: Path, tmp_path: Path) -> None:
    """`evoharness evaluate --serve-url`: the version is played by an OpenAI-compatible server (here the loopback
    server with a walkthrough player standing in for `vllm serve`), through the openai_compatible client; without
    structured outputs it samples freely, a policy of its own ('<version>.unconstrained'); with them every turn
    sends the turn grammar and the episodes are the version's own."""
    from typer.testing import CliRunner

    from evoharness.testing.alfworld_player import WalkthroughPlayer
    from evoharness.testing.loopback import LoopbackServer
    from evoharness_cli.cli import app

    with Warehouse(curated_db) as wh:
        version = train_sft_version(wh, teacher_datasets(wh, "expert")[0], TINY_TRAINING, tmp_path,
                                    "train").model_version
    free = f"{version}{UNCONSTRAINED_SUFFIX}"
    results, calls = {}, {}
    for name, options in ((free, []), (version, ["--structured-outputs", "vllm"])):
        with LoopbackServer(WalkthroughPlayer.for_split("valid_seen", 2)) as server:
            results[name] = CliRunner().invoke(app, [
                "evaluate", "--model-version", version, "--serve-url", server.openai_base_url, "--split",
                "valid_seen", "--limit", "2", "--max-steps", "40", "--engine", "fast", "--db", str(curated_db),
                *options])
            calls[name] = list(server.calls)
        assert results[name].exit_code == 0, results[name].output
        assert calls[name] and {c.body["model"] for c in calls[name]} == {version}  # served under its version
    assert not any("structured_outputs" in c.body for c in calls[free])
    assert all(c.body["structured_outputs"]["grammar"].startswith("root ::= ") for c in calls[version])
    with Warehouse(curated_db) as wh:
        episodes = wh.con.execute("SELECT teacher, status, won, policy_kind, model_version FROM episodes "
                                  "WHERE model_version = ? ORDER BY teacher", [version]).fetchall()
        rows = wh.con.execute("SELECT policy, split, episodes, success_rate FROM policy_evaluation "
                              "WHERE policy IN (?, ?) AND task_type = 'ALL' ORDER BY policy", [version, free]).fetchall()
    assert [e[0] for e in episodes] == [version, version, free, free]  # the second run resumed nothing of the first
    assert {e[1:2] + e[3:] for e in episodes} == {("finished", "student", version)}
    assert rows == [(name, "valid_seen", 2, sum(e[2] for e in episodes if e[0] == name) / 2)
                    for name in (version, free)]
    assert free in results[free].output and version in results[version].output  # printed beside its teacher


def test_dev_play_reads_in_policy_evaluation_and_train_play_does_not(tmp_path: Path, alfworld_data: Path) -> None:
    """``dev`` is where choices are made: its play is an evaluation like the held-out splits'; train play is not."""
    with Warehouse(tmp_path / "w.duckdb") as wh:
        for split in ("dev", "train"):
            collect(CollectionConfig(split=split, limit=2, engine="fast", workers=0, data_root=str(alfworld_data)),
                    wh, split)
        rows = wh.con.execute("SELECT split, episodes, success_rate FROM policy_evaluation "
                              "WHERE policy = 'expert' AND task_type = 'ALL'").fetchall()
    assert rows == [("dev", 2, 1.0)]


def test_a_checkpoint_plays_on_dev_as_its_own_policy_of_the_version(curated_db: Path, tmp_path: Path) -> None:
    from evoharness.errors import UnknownModelVersionError

    with Warehouse(curated_db) as wh:
        version = train_sft_version(wh, teacher_datasets(wh, "expert")[0], tiny_sft_settings(
            max_steps=2, save_steps=1, logging_steps=1, max_length=1024), tmp_path, "train")
        quick = QUICK | {"splits": ("dev",)}
        played = evaluate(wh, EvaluationConfig(model_version=version.model_version, checkpoint=1, **quick), "step1")
        stored = wh.con.execute("SELECT DISTINCT teacher, model_version FROM episodes WHERE policy_kind = 'student' "
                                "AND split = 'dev'").fetchall()
        with pytest.raises(UnknownModelVersionError, match=r".step-7'.*saved checkpoints at steps \[1, 2\]"):
            evaluate(wh, EvaluationConfig(model_version=version.model_version, checkpoint=7, **quick), "step7")
    assert played.policy == f"{version.model_version}.step-1" and played.by_split["dev"].written == 2
    assert stored == [(played.policy, version.model_version)]
    with pytest.raises(ValueError, match="dev or train only"):  # a step is chosen on dev, never held out
        EvaluationConfig(model_version=version.model_version, checkpoint=1, splits=("dev", "valid_unseen"))
