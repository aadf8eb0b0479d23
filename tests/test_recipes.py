"""Recipes: versioned files that name every training stage's settings, declared once in the settings models and
offered alike by the command line and Dagster; the paper's scale as configuration."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from evoharness.training.model_versions import version_id
from evoharness.training.recipes import (
    SECTIONS,
    RecipeError,
    load_recipe,
    option_fields,
    recipe_names,
    variant_overrides,
)
from tests.conftest import recipe_settings

CONFIGS = Path(__file__).resolve().parents[1] / "configs"


def test_accelerate_configs_load_in_accelerate() -> None:
    from accelerate.commands.config.config_args import ClusterConfig

    zero3 = ClusterConfig.from_yaml_file(CONFIGS / "accelerate" / "zero3.yaml")
    assert zero3.distributed_type.value == "DEEPSPEED" and zero3.deepspeed_config["zero_stage"] == 3
    assert zero3.deepspeed_config["zero3_save_16bit_model"] and zero3.mixed_precision == "bf16"
    fsdp = ClusterConfig.from_yaml_file(CONFIGS / "accelerate" / "fsdp.yaml")
    assert fsdp.distributed_type.value == "FSDP" and fsdp.fsdp_config["fsdp_version"] == 2
    assert fsdp.fsdp_config["fsdp_transformer_layer_cls_to_wrap"] == "Qwen3DecoderLayer"
    cpu = ClusterConfig.from_yaml_file(CONFIGS / "accelerate" / "multi_cpu.yaml")
    assert cpu.num_processes == 2 and zero3.num_processes == fsdp.num_processes == 8


def test_the_shipped_recipes_load() -> None:
    assert {"tiny", "small", "qwen3-8b"} <= set(recipe_names())
    for name in recipe_names():
        recipe = load_recipe(name)
        assert recipe.name == name and len(recipe.sha256) == 64


def test_qwen3_8b_recipe_is_the_papers() -> None:
    recipe = load_recipe("qwen3-8b")
    sft, grpo = recipe.sft, recipe.grpo
    assert sft.base_model == "Qwen/Qwen3-8B" and sft.lora is not None
    assert (sft.lora.r, sft.lora.alpha, sft.learning_rate, sft.epochs, sft.batch_size) == (64, 128, 1e-5, 4, 16)
    assert (grpo.num_generations, grpo.games_per_step, grpo.episode_steps, grpo.learning_rate, grpo.beta) == (
        8, 16, 70, 1e-6, 0.01)
    assert (grpo.max_new_tokens, grpo.epochs, grpo.max_grad_norm) == (512, 150, 1.0) and recipe.curriculum is None


def test_the_small_recipe_is_the_measured_one() -> None:
    """SFT 4 epochs on the student rendering; the curriculum of 200 train games; 24 guided GRPO steps at 1e-4."""
    recipe = load_recipe("small")
    assert (recipe.sft.base_model, recipe.sft.epochs, recipe.sft.prompt_set) == ("small", 4, "alfworld/bpe_student")
    assert recipe.curriculum is not None and recipe.curriculum.limit == 200
    grpo = recipe.grpo
    assert (grpo.max_steps, grpo.guided_per_group, grpo.learning_rate, grpo.episode_steps) == (24, 2, 1e-4, 70)
    assert grpo.episode_level_loss and grpo.scale_rewards == "batch"


def test_bf16_auto_follows_the_machine_and_an_explicit_value_wins() -> None:
    """An AVX2-only CPU emulates bf16 matmuls (many times slower than fp32): ``auto`` follows the hardware."""
    from evoharness.training.hardware import bf16_is_fast

    recipe = load_recipe("small")
    assert recipe.sft.bf16 is recipe.grpo.bf16 is bf16_is_fast()
    assert load_recipe("small", ["sft.bf16=true"]).sft.bf16


def test_recipes_keep_the_version_ids_of_the_presets_they_replace() -> None:
    """The ids the code's presets gave (computed on the code before recipes) are the ids the recipes give."""
    assert version_id("expert", "sft", "sft@v1", load_recipe("small", ["sft.bf16=false"]).sft) == \
        "expert-sft-64ccd4032875"
    assert version_id("expert", "sft", "sft@v1", load_recipe("small", ["sft.bf16=true"]).sft) == \
        "expert-sft-b6cbe5ed2c09"
    assert version_id("expert", "sft", "sft@v1", load_recipe("tiny").sft) == "expert-sft-d6ad46026c85"
    assert version_id("expert", "grpo", "expert-sft-x", load_recipe("tiny").grpo) == "expert-grpo-7954c0c37175"
    curriculum = recipe_settings("small", "grpo", bf16=False, games=["a", "b"], games_from="expert-sft-x",
                                 games_limit=None, max_steps=12, learning_rate=2e-4)  # the values before the 24-step recipe
    assert version_id("expert", "grpo", "expert-sft-x", curriculum) == "expert-grpo-bc3b08089d83"


def test_how_batches_are_padded_is_not_part_of_a_versions_id() -> None:
    """Padding to a multiple is masked: the same training, so the same version (it only changes the kernels' shapes)."""
    padded = load_recipe("small", ["sft.bf16=true", "sft.pad_to_multiple_of=64"]).sft
    assert padded.pad_to_multiple_of == 64
    assert version_id("expert", "sft", "sft@v1", padded) == "expert-sft-b6cbe5ed2c09"


def test_the_attention_kernel_follows_the_precision_and_is_not_part_of_a_versions_id() -> None:
    """auto: eager for bf16 training passes on a CPU (SDPA's CPU flash kernel is slow there), SDPA for fp32 and
    packed batches; an explicit kernel wins. The same function either way, so the same version."""
    import torch

    from evoharness.training.hardware import training_attention

    assert training_attention("auto", bf16=True) == ("sdpa" if torch.cuda.is_available() else "eager")
    assert training_attention("auto", bf16=False) == training_attention("auto", True, packed=True) == "sdpa"
    assert training_attention("sdpa", bf16=True) == "sdpa"
    eager = load_recipe("small", ["sft.bf16=true", "sft.attention=eager", "grpo.attention=eager"])
    assert version_id("expert", "sft", "sft@v1", eager.sft) == "expert-sft-b6cbe5ed2c09"
    assert version_id("expert", "grpo", "p", eager.grpo) == version_id("expert", "grpo", "p", load_recipe("small").grpo)


def test_overrides_set_single_values_and_are_recorded() -> None:
    recipe = load_recipe("tiny", ["grpo.learning_rate=1e-3", "sft.lora.r=8"], {"grpo.reward.call_cost": 0.05})
    assert recipe.grpo.learning_rate == 1e-3 and recipe.grpo.reward.call_cost == 0.05
    assert recipe.sft.lora is not None and recipe.sft.lora.r == 8
    assert recipe.stamp() == {"recipe": "tiny", "recipe_sha256": load_recipe("tiny").sha256, "recipe_overrides": [
        "grpo.learning_rate=1e-3", "sft.lora.r=8", "grpo.reward.call_cost=0.05"]}
    assert recipe.given("grpo") == {"learning_rate": 1e-3, "reward": recipe.grpo.reward}


def test_a_dagger_round_overrides_only_the_fields_it_sets() -> None:
    """The dagger section is SFT settings over the parent's: only the fields the file or overrides set count."""
    assert load_recipe("small").dagger is None
    with pytest.raises(RecipeError, match="no dagger section") as raised:
        load_recipe("small").dagger_given()
    assert "\n" not in str(raised.value)
    recipe = load_recipe("small", ["dagger.max_steps=1500", "dagger.learning_rate=1e-4"], {"dagger.seed": 2})
    assert recipe.dagger_given() == {"learning_rate": 1e-4, "max_steps": 1500, "seed": 2}
    with pytest.raises(RecipeError, match="dagger has no field 'max_step'"):
        load_recipe("small", ["dagger.max_step=1"])


@pytest.mark.parametrize(("overrides", "message"), [
    (["grpo.lerning_rate=1"], "grpo has no field 'lerning_rate'"),
    (["grpo.learning_rate=fast"], "grpo.learning_rate: Input should be a valid number"),
    (["nope.x=1"], "section one of sft, dagger, curriculum, grpo, relabel"),
    (["grpo.learning_rate"], "is not section.field=value"),
])
def test_a_bad_override_is_one_line_naming_the_key(overrides: list[str], message: str) -> None:
    with pytest.raises(RecipeError, match=message) as raised:
        load_recipe("tiny", overrides)
    assert "\n" not in str(raised.value)


def test_a_bad_recipe_file_is_one_line_naming_the_file_or_key(tmp_path: Path) -> None:
    with pytest.raises(RecipeError, match="recipe 'nope' not found"):
        load_recipe("nope")
    (tmp_path / "bad.yaml").write_text("grpo:\n  games_per_stepp: 4\n")
    with pytest.raises(RecipeError, match="games_per_stepp"):
        load_recipe(tmp_path / "bad.yaml")
    (tmp_path / "typo.yaml").write_text("gpro:\n  games_per_step: 4\n")
    with pytest.raises(RecipeError, match="unknown section 'gpro'"):
        load_recipe(tmp_path / "typo.yaml")


def _stage_interfaces() -> list[tuple[str, Any, Any]]:
    from assets.relabelling import RelabelledSFTRunConfig, RelabelRunConfig
    from assets.training import GRPORunConfig, SFTRunConfig
    from evoharness_cli.cli_training import dagger_command, grpo_command, relabel_command, sft_command

    return [("sft", sft_command, SFTRunConfig), ("grpo", grpo_command, GRPORunConfig),
            ("relabel", relabel_command, RelabelRunConfig), ("dagger", dagger_command, RelabelledSFTRunConfig)]


@pytest.mark.parametrize("index", range(4))
def test_cli_dagster_and_library_accept_the_same_fields_with_the_same_defaults(index: int) -> None:
    """Every typed field of a stage's settings is a CLI option and a Dagster config field; unset in both it keeps
    the recipe's value, so the CLI, Dagster and the library resolve the same settings."""
    import inspect

    section, command, run_config = _stage_interfaces()[index]
    fields = {f.name: f.path for f in option_fields(SECTIONS[section])}
    cli = inspect.signature(command).parameters
    assert set(fields) <= set(cli) and all(cli[name].default is None for name in fields)
    dagster = run_config.model_fields
    assert set(fields) <= set(dagster) and all(dagster[name].default is None for name in fields)
    default = run_config()
    assert default.values() == {} and default.load("small") == load_recipe("small")
    first = next(name for name in fields if fields[name] == name and name not in ("seed", "base_model", "view"))
    value = 7 if option_fields(SECTIONS[section])[list(fields).index(first)].annotation is int else None
    if value is not None:
        assert run_config(**{first: value}).load("tiny") == load_recipe("tiny", values={f"{section}.{first}": value})


def test_the_cli_passes_typed_options_as_recipe_values() -> None:
    """``--learning-rate`` reaches the command as grpo.learning_rate, ``--call-cost`` as grpo.reward.call_cost."""
    from typer.testing import CliRunner

    from evoharness_cli.cli import app

    seen: dict[str, Any] = {}
    from evoharness_cli import cli_training

    original = cli_training.load_recipe
    cli_training.load_recipe = lambda recipe, overrides, values: seen.update(  # type: ignore[assignment]
        recipe=recipe, overrides=overrides, values=values) or (_ for _ in ()).throw(SystemExit(0))
    try:
        CliRunner().invoke(app, ["grpo", "--recipe", "tiny", "--learning-rate", "1e-3", "--call-cost", "0.05",
                                 "--set", "grpo.max_steps=2"])
    finally:
        cli_training.load_recipe = original
    assert seen == {"recipe": "tiny", "overrides": ["grpo.max_steps=2"],
                    "values": {"grpo.learning_rate": 1e-3, "grpo.reward.call_cost": 0.05}}


def test_only_a_recipe_as_shipped_plays_the_held_out_splits_by_default() -> None:
    from evoharness.evaluation.protocol import protocol_splits
    from pipelines.sensors import evaluation_run_config

    assert variant_overrides(["grpo.seed=2", "sft.seed=1"]) == []  # seeds are replicates of the recipe
    assert variant_overrides(["grpo.seed=0", "grpo.beta=0"]) == ["grpo.beta=0"]
    assert protocol_splits([]) == protocol_splits(["grpo.seed=1"]) == ("dev", "valid_seen", "valid_unseen")
    assert protocol_splits(["grpo.beta=0", "grpo.seed=0"]) == ("dev",)  # a screen: choices are made on dev
    assert evaluation_run_config(["sft.epochs=2"]) == {"ops": {"student_evaluation": {"config": {"splits": ["dev"]}}}}
