"""benchmarks/student_size.py: the sizes it prices are the students the trainer builds."""

from __future__ import annotations

import pytest

from evoharness.training.tiny_student import SMALL, STUDENT_PRESETS
from tests.conftest import benchmark_module


def test_a_size_is_shaped_as_the_small_preset_and_counts_its_parameters() -> None:
    from transformers import Qwen3Config, Qwen3ForCausalLM

    student_size = benchmark_module("student_size")
    assert student_size.student_spec("256x4") == STUDENT_PRESETS[SMALL]
    for size in ("256x4", "384x6", "320x3"):
        spec = student_size.student_spec(size)
        model = Qwen3ForCausalLM(Qwen3Config(
            vocab_size=spec.vocab_size, hidden_size=spec.hidden_size, intermediate_size=spec.intermediate_size,
            num_hidden_layers=spec.num_hidden_layers, num_attention_heads=spec.num_attention_heads,
            num_key_value_heads=spec.num_key_value_heads, head_dim=spec.head_dim, tie_word_embeddings=True))
        assert student_size.parameters(student_size.student_shapes(spec)) == sum(p.numel() for p in model.parameters())


@pytest.mark.parametrize("size", ["384", "100x4", "0x2", "384x0"])
def test_a_malformed_size_is_a_one_line_error(size: str) -> None:
    with pytest.raises(SystemExit, match="size"):
        benchmark_module("student_size").student_spec(size)
