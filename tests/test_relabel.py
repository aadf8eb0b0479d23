"""DAgger: a student plays train games, the expert labels every state it reaches, the labelled states join its
dataset as a relabelled dataset, and training goes on from the student's weights with the lineage intact."""

from __future__ import annotations

from pathlib import Path

import pytest

from evoharness.curation.build import DatasetResult
from evoharness.curation.relabelled import LABEL_CONSOLIDATOR, curate_relabelled
from evoharness.harness.grammar import ActionKind, parse_turn
from evoharness.training.model_versions import continued_sft_settings, teacher_datasets
from evoharness.training.relabel import RelabelConfig, collect_expert_labels, relabel_policy_name
from tests.conftest import train_sft_version
from warehouse import Warehouse

# Game 0 is the one the student learned by heart; on game 1 it makes mistakes for the expert to correct.
RELABEL = {"limit": 2, "max_steps": 12, "max_tokens": 64, "concurrency": 2, "engine": "fast", "workers": 0}


@pytest.fixture(scope="module")
def relabelled(overfit: tuple[Path, str, Path]) -> tuple[Path, str, DatasetResult]:
    db, model_version, _ = overfit
    with Warehouse(db) as wh:
        collected = collect_expert_labels(wh, RelabelConfig(model_version=model_version, **RELABEL), "relabel")
        assert len(collected.records) == 2
        base = wh.scalar("SELECT dataset_id FROM model_versions WHERE model_version = ?", [model_version])
        dataset = curate_relabelled(wh, base, model_version, "relabel")
    return db, model_version, dataset


def test_every_turn_of_a_relabel_episode_carries_the_experts_turn(relabelled: tuple[Path, str, DatasetResult]) -> None:
    db, model_version, _ = relabelled
    with Warehouse(db, read_only=True) as wh:
        episodes = wh.con.execute("SELECT teacher, policy_kind, model_version, split FROM episodes "
                                  "WHERE policy_kind = 'relabel'").fetchall()
        steps = wh.con.execute("SELECT s.label, s.turn_vars, s.kind FROM steps s JOIN episodes e USING "
                               "(episode_id) WHERE e.policy_kind = 'relabel' ORDER BY episode_id, t").fetchall()
        agreed = wh.scalar("SELECT avg(agreed::INT) FROM expert_labels WHERE model_version = ?", [model_version])
        evaluated = wh.scalar("SELECT count(*) FROM policy_evaluation WHERE policy = ?", [model_version])
    assert episodes == [(relabel_policy_name(model_version), "relabel", model_version, "train")] * 2
    # labels="env": every environment turn of the student carries the expert's command (and the variables to
    # re-render its prompt), its meta-action turns none
    assert steps and all((label is not None) == (turn_vars is not None) == (kind == "env")
                         for label, turn_vars, kind in steps)
    assert {parse_turn(label).kind for label, _, _ in steps if label} == {ActionKind.ENV}
    assert 0 < agreed < 1  # it plays its own game like the expert, not the other one
    assert evaluated == 0  # relabelling episodes are never an evaluation of the student


def test_relabelled_dataset_is_the_base_plus_the_labelled_states(relabelled: tuple[Path, str, DatasetResult]) -> None:
    import datasets

    db, model_version, result = relabelled
    with Warehouse(db) as wh:
        base_id = wh.scalar("SELECT dataset_id FROM model_versions WHERE model_version = ?", [model_version])
        base_train = wh.scalar("SELECT n_train FROM datasets WHERE dataset_id = ?", [base_id])
        labelled = wh.scalar("SELECT count(*) FROM dataset_examples WHERE dataset_id = ? AND consolidator = ?",
                             [result.dataset_id, LABEL_CONSOLIDATOR])
        config = wh.scalar("SELECT config->>'base_dataset_id' FROM datasets WHERE dataset_id = ?",
                           [result.dataset_id])
        again = curate_relabelled(wh, base_id, model_version, "relabel-again")
        # a resumed relabelling: one episode's labels collected by another run are the same content
        first = wh.scalar("SELECT min(episode_id) FROM expert_labels WHERE model_version = ?", [model_version])
        wh.con.execute("UPDATE episodes SET run_id = run_id || '-resumed' WHERE episode_id = ?", [first])
        resumed = curate_relabelled(wh, base_id, model_version, "relabel-resumed")
        wh.con.execute("UPDATE episodes SET run_id = replace(run_id, '-resumed', '') WHERE episode_id = ?",
                       [first])
        collected = collect_expert_labels(wh, RelabelConfig(model_version=model_version, **RELABEL), "again")
        teachers_own = teacher_datasets(wh, "expert")  # what `evoharness sft --teacher expert` chooses from
    assert labelled > 0 and result.n_train == base_train + labelled
    assert teachers_own[0] == base_id and result.dataset_id not in teachers_own  # a DAgger dataset is not the SFT's
    assert config == base_id
    on_disk = datasets.load_from_disk(result.path)["train"]
    assert sorted(set(on_disk["consolidator"])) == [LABEL_CONSOLIDATOR, "rule"]
    assert all(row["turn_vars"] for row in on_disk)  # every example re-renders in the student's prompt set
    assert again.reused and again.dataset_id == result.dataset_id
    assert resumed.reused and resumed.dataset_id == result.dataset_id
    assert collected.skipped == 2 and not collected.records  # a rerun resumes: nothing is played twice


def test_training_goes_on_from_the_parent_and_lineage_names_the_labelled_episodes(
        relabelled: tuple[Path, str, DatasetResult]) -> None:
    db, model_version, result = relabelled
    with Warehouse(db) as wh:
        settings = continued_sft_settings(wh, model_version, max_steps=2)
        parent_path = wh.scalar("SELECT path FROM model_versions WHERE model_version = ?", [model_version])
        child = train_sft_version(wh, result.dataset_id, settings, db.parent / "models", "dagger",
                                  parent_version=model_version)
        sources = wh.con.execute("SELECT DISTINCT consolidator, teacher FROM lineage WHERE model_version = ?",
                                 [child.model_version]).fetchall()
    assert settings.base_model == parent_path and settings.prompt_set == "alfworld/bpe_student"
    assert child.row["parent_version"] == model_version and child.row["dataset_id"] == result.dataset_id
    assert sorted(sources) == [(LABEL_CONSOLIDATOR, relabel_policy_name(model_version)), ("rule", "expert")]


def test_dagster_materializes_the_relabelled_dataset_and_student(overfit: tuple[Path, str, Path],
                                                                 tmp_path: Path) -> None:
    """A fresh warehouse copy: the two DAgger assets in one run, ids passed by materialization metadata."""
    import shutil

    import dagster as dg

    from assets.relabelling import relabelled_dataset, relabelled_student
    from assets.training import grpo_curriculum
    from pipelines.resources import AlfworldResource, StudentResource, TrainingLauncher, WarehouseResource

    db, model_version, _ = overfit
    copy = tmp_path / "w.duckdb"
    with Warehouse(db) as wh:
        wh.con.execute("CHECKPOINT")
    shutil.copy(db, copy)
    resources = {"warehouse": WarehouseResource(path=str(copy)), "alfworld": AlfworldResource(),
                 "students": StudentResource(recipe="tiny", models_dir=str(tmp_path / "models")), "training": TrainingLauncher(),
                 "pipes_client": dg.PipesSubprocessClient()}
    round_on = ["dagger.max_steps=12", "dagger.logging_steps=1"]  # the tiny recipe has no round of its own
    config = {"ops": {"relabelled_dataset": {"config": {"model_version": model_version, "limit": 1, "max_steps": 8,
                                                        "max_tokens": 64, "engine": "fast", "overrides": round_on}},
                      "relabelled_student": {"config": {"overrides": round_on}},
                      "grpo_curriculum": {"config": {"overrides": [*round_on, "curriculum.limit=1",
                                                                   "grpo.episode_steps=4"]}}}}
    with dg.instance_for_test() as instance:
        instance.add_dynamic_partitions("teacher", ["expert"])
        result = dg.materialize([relabelled_dataset, relabelled_student, grpo_curriculum], instance=instance,
                                partition_key="expert", resources=resources, run_config=config)
        idle = dg.materialize([relabelled_dataset, relabelled_student], instance=instance, partition_key="expert",
                              resources=resources)  # the recipe as shipped: no round
    assert result.success and idle.success
    assert idle.asset_materializations_for_node("relabelled_student")[0].metadata["dagger"].value == \
        "none in the recipe"
    curriculum = result.asset_materializations_for_node("grpo_curriculum")[0].metadata
    assert curriculum["played_by"].value == result.asset_materializations_for_node(
        "relabelled_student")[0].metadata["model_version"].value  # GRPO goes on from the DAgger student
    dataset = result.asset_materializations_for_node("relabelled_dataset")[0].metadata
    student = result.asset_materializations_for_node("relabelled_student")[0].metadata
    assert dataset["relabelled_by"].value == model_version and ".relabel@v" in dataset["dataset_id"].value
    assert "agreed_with_expert" in dataset["agreement_with_expert"].value
    assert student["parent_version"].value == model_version and student["dataset_id"].value == \
        dataset["dataset_id"].value


def test_the_dagger_command_runs_one_round_as_the_recipe_says(overfit: tuple[Path, str, Path], tmp_path: Path
                                                               ) -> None:
    """`evoharness dagger`: the relabel section's play, then SFT from the student with the dagger section over its
    settings; rerun, it reuses both; a recipe without a round is a one-line error."""
    import shutil

    from typer.testing import CliRunner

    from evoharness_cli.cli import app

    db, model_version, _ = overfit
    copy = tmp_path / "w.duckdb"
    with Warehouse(db) as wh:
        wh.con.execute("CHECKPOINT")
    shutil.copy(db, copy)
    args = ["dagger", "--model-version", model_version, "--recipe", "tiny", "--db", str(copy), "--models-dir",
            str(tmp_path / "models"), "--set", "relabel.limit=1", "--set", "relabel.max_steps=6", "--set",
            "dagger.max_steps=3", "--learning-rate", "1e-4"]
    first = CliRunner().invoke(app, args)
    assert first.exit_code == 0, first.output
    again = CliRunner().invoke(app, args)
    assert again.exit_code == 0 and again.output.count("(stored, reused)") == 2  # the dataset and the version
    with Warehouse(copy, read_only=True) as wh:
        [(parent, settings, overrides)] = wh.con.execute(
            "SELECT parent_version, settings, recipe_overrides FROM model_versions WHERE parent_version IS NOT NULL "
            "AND CAST(recipe_overrides AS VARCHAR) LIKE '%dagger.max_steps=3%'").fetchall()
    assert parent == model_version
    assert '"max_steps":3' in settings.replace(" ", "") and '"learning_rate":0.0001' in settings.replace(" ", "")
    assert "dagger.learning_rate=0.0001" in overrides  # the typed option, recorded as the override it is
    refused = CliRunner().invoke(app, ["dagger", "--model-version", model_version, "--recipe", "tiny", "--db",
                                       str(copy)])
    assert refused.exit_code != 0 and "has no dagger section" in refused.output
