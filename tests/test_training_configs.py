"""The paper's scale as configuration: accelerate configs that accelerate itself reads, and the Qwen3-8B preset."""

from __future__ import annotations

from pathlib import Path

import pytest

from evoharness.training.grpo import GRPOSettings
from evoharness.training.presets import load_preset
from evoharness.training.sft import SFTSettings

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


def test_qwen3_8b_preset_is_the_papers() -> None:
    sft, grpo = load_preset("qwen3-8b")
    assert sft.base_model == "Qwen/Qwen3-8B" and sft.lora is not None
    assert (sft.lora.r, sft.lora.alpha, sft.learning_rate, sft.epochs) == (64, 128, 1e-5, 4)
    assert (grpo.num_generations, grpo.games_per_step, grpo.episode_steps, grpo.learning_rate, grpo.beta) == (
        8, 16, 70, 1e-6, 0.01)
    code_sft, code_grpo = SFTSettings.for_base("Qwen/Qwen3-8B"), GRPOSettings.for_base("Qwen/Qwen3-8B")
    differs = {"bf16"}  # the files are for GPUs
    assert sft.model_dump(exclude=differs) == code_sft.model_dump(exclude=differs)
    assert grpo.model_dump(exclude=differs) == code_grpo.model_dump(exclude=differs)


def test_a_preset_with_an_unknown_setting_is_refused(tmp_path: Path) -> None:
    (tmp_path / "bad.yaml").write_text("grpo:\n  games_per_stepp: 4\n")
    with pytest.raises(ValueError, match="unknown grpo settings.*games_per_stepp"):
        load_preset(tmp_path / "bad.yaml")


def test_the_small_preset_trains_in_bf16_only_where_the_machine_has_bf16_units() -> None:
    """An AVX2-only CPU emulates bf16 matmuls (over 10x slower than fp32 on an AMD EPYC): the preset follows
    the hardware."""
    from evoharness.training.hardware import bf16_is_fast

    assert SFTSettings.for_base("small").bf16 is GRPOSettings.for_base("small").bf16 is bf16_is_fast()
    assert SFTSettings.for_base("small", bf16=True).bf16  # an explicit choice still wins
