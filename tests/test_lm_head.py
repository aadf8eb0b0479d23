"""The fused LM head projects only the labelled positions, with the same log-probabilities and gradients as TRL's
every-position scoring on a CPU."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import torch
import trl.trainer.utils as trl_utils
from transformers import Qwen3Config, Qwen3ForCausalLM
from trl.kernels import ChunkedLogProbFunction

from evoharness.training.lm_head import score_positions


@pytest.fixture(autouse=True)
def trl_choice_after() -> Iterator[None]:
    yield
    score_positions("all")


def fused_model() -> Any:
    torch.manual_seed(0)
    config = Qwen3Config(vocab_size=97, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, head_dim=8, tie_word_embeddings=True)
    model = Qwen3ForCausalLM(config)
    trl_utils.add_fused_lm_head(model, outputs=("log_probs", "entropy", "is_top1"))
    return model


def batch() -> dict[str, torch.Tensor]:
    generator = torch.Generator().manual_seed(1)
    ids = torch.randint(0, 97, (3, 20), generator=generator)
    labels = torch.full_like(ids, -100)
    labels[0, 15:] = ids[0, 15:]  # a completion at each row's end, as a student's turn
    labels[1, 12:18] = ids[1, 12:18]
    labels[2, 19:] = ids[2, 19:]
    return {"input_ids": ids, "attention_mask": torch.ones_like(ids), "labels": labels}


def scored(which: str, monkeypatch: pytest.MonkeyPatch) -> tuple[Any, dict[str, torch.Tensor], list[int]]:
    """One forward and backward of the fused head under ``which``: its outputs, the gradients, and the rows each
    projection call received."""
    rows: list[int] = []

    class Spy:
        @staticmethod
        def apply(hidden: torch.Tensor, *args: Any) -> Any:
            rows.append(hidden.shape[0])
            return ChunkedLogProbFunction.apply(hidden, *args)

    monkeypatch.setattr(trl_utils, "_ChunkedLogProbFunction", Spy)
    score_positions(which)  # type: ignore[arg-type]
    model = fused_model()
    outputs = model(**batch(), fused_lm_head=True)
    outputs.loss.backward()
    return outputs, {n: p.grad.clone() for n, p in model.named_parameters()}, rows


def test_labelled_positions_only_with_the_same_log_probabilities_and_gradients(monkeypatch) -> None:
    every, every_grads, every_rows = scored("all", monkeypatch)
    labelled, labelled_grads, labelled_rows = scored("labelled", monkeypatch)
    assert every_rows == [3 * 19]  # every position but the last of each row
    assert labelled_rows == [5 + 6 + 1]  # only those with a next-token label
    torch.testing.assert_close(labelled.log_probs, every.log_probs)
    torch.testing.assert_close(labelled.entropy, every.entropy)
    assert torch.equal(labelled.is_top1, every.is_top1)
    torch.testing.assert_close(labelled.loss, every.loss)
    for name, grad in every_grads.items():
        torch.testing.assert_close(labelled_grads[name], grad, msg=name)
    assert (labelled.log_probs[~labelled.label_mask] == 0).all()
