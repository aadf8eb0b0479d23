"""Every recipe that realizes a model version claims it: a recipe file changed where it does not touch a stage (a
comment, another section) still finds that stage's stored versions, as ``students.py`` needs to regenerate rows."""

from __future__ import annotations

from pathlib import Path

from evoharness.training.model_versions import RESULT_FIELDS, TrainingJob, claimed, store_training_result
from warehouse import Warehouse


def stamp(sha: str, *overrides: str) -> dict:
    return {"recipe": "small", "recipe_sha256": sha, "recipe_overrides": list(overrides)}


def test_a_version_named_again_by_a_changed_recipe_file_is_found_by_both(tmp_path: Path) -> None:
    job = TrainingJob(stage="sft", model_version="expert-sft-abc", teacher="expert", dataset_id="sft-expert@v1",
                      source="/d", base_model="small", output_dir=str(tmp_path / "m"), settings={"seed": 0},
                      recipe=stamp("sha-a"), run_id="r")
    result = {key: [] if key.endswith("history") else 0 for key in RESULT_FIELDS} | {"path": str(tmp_path / "m")}
    with Warehouse(tmp_path / "w.duckdb") as wh:
        version = store_training_result(wh, job, result)
        claimed(wh, version, stamp("sha-b", "sft.seed=0"))
        claimed(wh, version, stamp("sha-b", "sft.seed=0"))  # idempotent
        claimed(wh, version, None)  # a version trained without a recipe claims nothing
        found = {sha: wh.query("recipe_model_versions", recipe="small", recipe_sha256=sha, teacher="expert")[1]
                 for sha in ("sha-a", "sha-b", "sha-c")}
    assert [(row[0], row[6]) for row in found["sha-a"]] == [("expert-sft-abc", "[]")]
    assert [(row[0], row[6]) for row in found["sha-b"]] == [("expert-sft-abc", '["sft.seed=0"]')]
    assert found["sha-c"] == []


def test_a_version_trained_from_a_screened_parent_is_a_variant_and_plays_dev_only(tmp_path: Path) -> None:
    """The sensor's split rule reads the overrides of a version's whole lineage: a GRPO stage that set nothing,
    trained from a DAgger round that set its own steps, is a screen (a 2026-12-06 GRPO child of a DAgger screen was
    sent to the held-out splits by its own empty overrides)."""
    from pipelines.resources import WarehouseResource
    from pipelines.sensors import evaluation_run_config

    result = {key: [] if key.endswith("history") else 0 for key in RESULT_FIELDS} | {"path": str(tmp_path / "m")}
    chain = [("sft", None, []), ("dagger", "expert-sft", ["dagger.max_steps=1500"]), ("grpo", "expert-dagger", []),
             ("seed", "expert-sft", ["grpo.seed=1"])]
    with Warehouse(tmp_path / "w.duckdb") as wh:
        for name, parent, overrides in chain:
            job = TrainingJob(stage="grpo" if name in ("grpo", "seed") else "sft", model_version=f"expert-{name}",
                              teacher="expert", dataset_id="sft-expert@v1", source="/d", base_model="small",
                              output_dir=str(tmp_path / name), settings={"seed": 0}, parent_version=parent,
                              recipe=stamp("sha-a", *overrides), run_id="r")
            store_training_result(wh, job, result)
    versions = WarehouseResource(path=str(tmp_path / "w.duckdb")).model_versions()
    assert versions == {"expert-sft": [], "expert-dagger": ["dagger.max_steps=1500"],
                        "expert-grpo": ["dagger.max_steps=1500"], "expert-seed": ["grpo.seed=1"]}
    splits = {v: evaluation_run_config(o)["ops"]["student_evaluation"]["config"]["splits"] for v, o in versions.items()}
    final = ["dev", "valid_seen", "valid_unseen"]
    assert splits == {"expert-sft": final, "expert-dagger": ["dev"], "expert-grpo": ["dev"], "expert-seed": final}
