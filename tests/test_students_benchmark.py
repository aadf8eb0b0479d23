"""benchmarks/students.py, the results protocol: commands that rerun a row alone, and claims over seeds."""

from __future__ import annotations

from types import ModuleType

import pytest

from evoharness.training.recipes import load_recipe
from tests.conftest import REPO


def test_a_rows_command_names_recipe_seed_launcher_and_environment(students: ModuleType,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ACCELERATE_USE_CPU", "true")
    monkeypatch.setenv("EVOHARNESS_DB", "/w/students.duckdb")
    recipe = load_recipe("small")
    command = students.grpo_command(recipe, ["grpo.learning_rate=1e-4"], "expert-sft-x", 2,
                                    "accelerate launch --config_file configs/accelerate/multi_cpu.yaml")
    line = students.with_environment(command)
    assert line.startswith("ALFWORLD_DATA=") and "ACCELERATE_USE_CPU=true" in line
    assert "EVOHARNESS_DB=/w/students.duckdb" in line
    for part in ("--recipe small", "--set grpo.learning_rate=1e-4", "--seed 2", "--parent-version expert-sft-x",
                 "--launch 'accelerate launch --config_file configs/accelerate/multi_cpu.yaml'"):
        assert part in line


def test_claims_summarise_seeds_against_their_parent(students: ModuleType) -> None:
    def row(version: str, stage: str, parent: str | None, rate: float, paired: dict | None = None) -> dict:
        return {"model_version": version, "stage": stage, "parent_version": parent, "dev": {"success": rate},
                "against_parent": {"dev": paired} if paired else {}}

    rows = [row("sft", "sft", None, 0.6),
            row("g0", "grpo", "sft", 0.7, {"only_child": 20, "only_parent": 5, "p_mcnemar": 0.004}),
            row("g1", "grpo", "sft", 0.62, {"only_child": 6, "only_parent": 3, "p_mcnemar": 0.5}),
            row("g2", "grpo", "sft", 0.66, {"only_child": 12, "only_parent": 3, "p_mcnemar": 0.035})]
    grpo = next(c for c in students.claims(rows) if c["stage"] == "grpo" and c["split"] == "dev")
    assert grpo["seeds"] == 3 and (grpo["min"], grpo["max"]) == (0.62, 0.7)
    assert grpo["mean"] == pytest.approx(0.66) and grpo["mean_gain_over_parent"] == pytest.approx(0.06)
    assert grpo["seeds_better_than_parent_p05"] == 2
    assert not [c for c in students.claims(rows) if c["split"] == "valid_unseen"]  # not played: no claim


def test_a_grpo_configuration_finds_the_sft_parent_trained_without_its_grpo_overrides(students: ModuleType) -> None:
    grpo_only = ["grpo.max_steps=48", "grpo.seed=1"]
    assert students.stage_overrides(grpo_only, "sft") == []  # the recipe's SFT parent is this configuration's
    assert students.stage_overrides(grpo_only, "grpo") == ["grpo.max_steps=48"]  # seeds are replicates
    assert students.stage_overrides(["sft.epochs=2", "grpo.beta=0.1"], "sft") == ["sft.epochs=2"]


def test_a_dagger_variant_reuses_the_sft_parent_and_shapes_its_grpo_children(students: ModuleType) -> None:
    variant = ["dagger.max_steps=1500", "relabel.limit=300", "grpo.beta=0", "dagger.seed=1"]
    assert students.stage_overrides(variant, "sft") == []
    assert students.stage_overrides(variant, "dagger") == ["dagger.max_steps=1500", "relabel.limit=300"]
    assert students.stage_overrides(variant, "grpo") == ["grpo.beta=0"]
    assert students.stage_of({"stage": "sft", "parent_version": "expert-sft-x"}) == "dagger"
    assert students.stage_of({"stage": "sft", "parent_version": None}) == "sft"
    command = students.dagger_command(load_recipe("small", variant[:1]), variant[:1], "expert-sft-x", 1, None)
    assert command[:4] == ["evoharness", "dagger", "--model-version", "expert-sft-x"]
    assert command[-2:] == ["--seed", "1"] and "dagger.max_steps=1500" in command
    sft = students.sft_command(load_recipe("small", variant), variant, 0, None)
    assert not [part for part in sft if part.startswith(("dagger.", "relabel.", "grpo."))]  # only its own


def test_a_row_reports_held_out_play_only_of_a_recipe_as_shipped(students: ModuleType,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(students, "played", lambda db, policy, split: {"success": 0.7})  # held-out play exists too
    monkeypatch.setattr(students, "precision", lambda settings: {"bf16": True})
    screen = {"model_version": "expert-grpo-x", "stage": "grpo", "recipe_stage": "grpo", "parent_version": None, "settings": {"seed": 0},
              "recipe": "small", "recipe_sha256": "s", "recipe_overrides": '["grpo.beta=0"]', "code_version": "c",
              "seconds": 1.0}
    row = students.version_row("unused.duckdb", screen, ["evoharness grpo ..."])
    assert row["splits_played"] == ["dev"]
    assert row["command"][0] == "evoharness grpo ..." and row["command"][-1].endswith(
        "evoharness evaluate --model-version expert-grpo-x --split dev")
    assert not any("valid_" in line for line in row["command"])  # a screen's held-out play is not reported
    final = students.version_row("unused.duckdb", screen | {"recipe_overrides": '["grpo.seed=1"]'}, [])
    assert final["splits_played"] == ["dev", "valid_seen", "valid_unseen"]
    assert final["command"][-1].endswith("--split valid_seen --split valid_unseen")


def test_a_claim_covers_the_seeds_an_earlier_run_left_in_the_results_file(students: ModuleType) -> None:
    """A configuration's rows are those of this recipe file and these overrides (each stage its own), whether this
    run's warehouse still holds their versions or only the results file does; the claim is over all of them."""
    recipe = load_recipe("small")

    def row(version: str, stage: str, seed: int, rate: float, overrides: list[str], sha: str = recipe.sha256) -> dict:
        return {"model_version": version, "stage": stage, "parent_version": "sft" if stage == "grpo" else None,
                "seed": seed, "recipe": "small", "recipe_sha256": sha, "recipe_overrides": overrides,
                "dev": {"success": rate}, "against_parent": {}}

    fade = ["grpo.guided_until_step=16"]
    earlier = [row("sft", "sft", 0, 0.77, []), row("g0", "grpo", 0, 0.80, [*fade, "grpo.seed=0"]),
               row("g1", "grpo", 1, 0.80, [*fade, "grpo.seed=1"]), row("r0", "grpo", 0, 0.79, ["grpo.seed=0"]),
               row("old", "grpo", 2, 0.5, [*fade, "grpo.seed=2"], sha="0" * 64)]
    this_run = [row("g2", "grpo", 2, 0.86, [*fade, "grpo.seed=2"])]
    measured = students.configuration_rows([*earlier, *this_run], recipe, fade)
    assert [r["model_version"] for r in measured] == ["sft", "g0", "g1", "g2"]
    grpo = next(c for c in students.claims(measured) if c["stage"] == "grpo" and c["split"] == "dev")
    assert grpo["seeds"] == 3 and grpo["mean"] == pytest.approx(0.82)


def test_a_version_trained_again_under_its_id_is_not_mixed_into_the_earlier_rows(students: ModuleType) -> None:
    """The same id from another training (a rebuilt warehouse) is another lineage: the results stage refuses it."""
    first = {"model_version": "expert-sft-x", "train_seconds": 3065.6, "code_version": "0.1.0+ga"}
    assert students.retrained([first], [dict(first)]) == []  # the same version, reported again
    assert students.retrained([first], [first | {"train_seconds": 3499.4}]) == ["expert-sft-x"]
    assert students.retrained([first], [first | {"code_version": "0.1.0+gb"}]) == ["expert-sft-x"]
    assert students.retrained([first], [first | {"model_version": "expert-sft-y", "train_seconds": 1.0}]) == []


def test_a_grpo_row_keeps_the_curve_its_chart_draws(students: ModuleType, monkeypatch: pytest.MonkeyPatch) -> None:
    import json

    monkeypatch.setattr(students, "played", lambda db, policy, split: None)
    monkeypatch.setattr(students, "precision", lambda settings: {"bf16": True})
    history = [{"step": 1, "kl": 0.01, "episode/success": 0.5, "loss": 0.3, "rewards/success/mean": 0.5}]
    version = {"model_version": "expert-grpo-x", "stage": "grpo", "recipe_stage": "grpo", "parent_version": None,
               "settings": {"seed": 0}, "recipe": "small", "recipe_sha256": "s", "recipe_overrides": "[]",
               "code_version": "c", "seconds": 1.0, "rollout_history": json.dumps(history)}
    assert students.version_row("unused.duckdb", version, [])["curve"] == [
        {"step": 1, "kl": 0.01, "episode/success": 0.5}]
    assert "curve" not in students.version_row("unused.duckdb", version | {"recipe_stage": "sft"}, [])


def test_a_recipe_files_earlier_claim_is_kept_when_the_file_changes(students: ModuleType) -> None:
    recipe = load_recipe("small")
    earlier = {"claims": {"small": [{"stage": "grpo", "split": "dev", "mean": 0.7}], "small grpo.beta=0": []},
               "runs": [{"recipe": "small", "recipe_sha256": "a" * 64, "recipe_overrides": ["grpo.seed=1"]},
                        {"recipe": "small", "recipe_sha256": "b" * 64, "recipe_overrides": ["grpo.beta=0"]}]}
    assert students.superseded_key(earlier, recipe, []) == "small @aaaaaaaa"
    assert students.superseded_key(earlier, recipe, ["grpo.beta=0"]) == "small grpo.beta=0 @bbbbbbbb"
    assert students.superseded_key(earlier, recipe, ["grpo.beta=0.1"]) is None  # no earlier claim
    earlier["runs"][0]["recipe_sha256"] = recipe.sha256  # the claim is this file's own: the new one replaces it
    assert students.superseded_key(earlier, recipe, []) is None


def test_a_variant_cannot_be_played_on_the_held_out_splits(students: ModuleType,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("sys.argv", ["students.py", "--set", "grpo.beta=0", "--stages", "final"])
    with pytest.raises(SystemExit) as exited:
        students.main()
    assert exited.value.code == 2


def test_commands_import_the_checkout_they_run_from(students: ModuleType, monkeypatch: pytest.MonkeyPatch) -> None:
    """A worktree's run must not train with the code of the checkout the package was installed from (editable)."""
    import os
    import subprocess
    import sys

    monkeypatch.setenv("PYTHONPATH", "/elsewhere")
    env = students.report.this_checkout_env()
    assert env["PYTHONPATH"].split(os.pathsep) == [str(REPO), "/elsewhere"]
    found = subprocess.run([sys.executable, "-c", "import evoharness; print(evoharness.__file__)"], cwd="/",
                           env=os.environ | env, capture_output=True, text=True, check=True).stdout
    assert found.startswith(str(REPO))


def test_a_replicates_results_file_names_its_own_curves(students: ModuleType) -> None:
    """Rows and curves of a replicate on another machine (the same version ids, trained anew) go to its own files."""
    default = students.RESULTS
    replicate = default.with_name("students_zen4.json")
    assert students.curve_name(default, "small") == "small"
    assert students.curve_path(students.curve_name(replicate, "small grpo.beta=0")).name == \
        "students_zen4_small_grpo.beta=0.png"
