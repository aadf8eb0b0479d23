"""Micro-batched local generation: the same completions as one at a time, real batches, failures reach everyone."""

from __future__ import annotations

import asyncio

import pytest

from evoharness.teachers.clients.hf_batching import BatchGenerator, Sampling

PROMPTS = ["<think>I go to the countertop.</think>", "Task: put a clean mug in coffeemachine.",
           "You are in the middle of a room. Looking quickly around you, you see a cabinet 1, a fridge 1.",
           "recall [where to find apple]", "take apple 1 from countertop 1"]
GREEDY = Sampling(max_new_tokens=12)


@pytest.fixture(scope="module")
def generator(tmp_path_factory: pytest.TempPathFactory) -> BatchGenerator:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from evoharness.testing.tiny_hf import build_tiny_qwen3

    folder = build_tiny_qwen3(tmp_path_factory.mktemp("tiny"))
    tokenizer = AutoTokenizer.from_pretrained(folder)
    return BatchGenerator(AutoModelForCausalLM.from_pretrained(folder).eval(), tokenizer, max_batch=4)


def _ids(generator: BatchGenerator, text: str) -> list[int]:
    return generator.tokenizer(text)["input_ids"]


def test_a_padded_batch_decodes_like_single_prompts(generator: BatchGenerator) -> None:
    prompts = [_ids(generator, p) for p in PROMPTS[:3]]
    assert len({len(p) for p in prompts}) == 3  # different lengths: left padding is exercised
    singles = [generator.run_batch([p], GREEDY)[0] for p in prompts]
    assert generator.run_batch(prompts, GREEDY) == singles
    assert all(0 < len(c) <= 12 for c in singles)


def test_concurrent_requests_share_batches(generator: BatchGenerator) -> None:
    prompts = [_ids(generator, p) for p in PROMPTS]
    expected = [generator.run_batch([p], GREEDY)[0] for p in prompts]
    generator.batch_sizes.clear()

    async def play() -> list[list[int]]:
        return list(await asyncio.gather(*(generator.generate(p, GREEDY) for p in prompts)))

    assert asyncio.run(play()) == expected
    assert generator.batch_sizes == [4, 1]  # max_batch 4: five waiting turns run as two batches


def test_a_failed_batch_fails_every_waiting_request(generator: BatchGenerator) -> None:
    bad = Sampling(max_new_tokens=-1)

    async def play() -> list[object]:
        return list(await asyncio.gather(*(generator.generate(_ids(generator, p), bad) for p in PROMPTS[:2]),
                                         return_exceptions=True))

    results = asyncio.run(play())
    assert len(results) == 2 and all(isinstance(r, Exception) for r in results)
    assert asyncio.run(generator.generate(_ids(generator, PROMPTS[0]), GREEDY))  # and it still serves afterwards
