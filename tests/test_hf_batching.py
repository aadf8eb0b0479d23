"""Local generation: the batch engine (left-padded ``generate``) and the continuous engine (slot KV cache) give the
same greedy completions, a continuous slot is refilled at once, and failures reach every waiting request."""

from __future__ import annotations

import asyncio
from dataclasses import fields
from typing import Any

import pytest

from evoharness.harness.grammar import parse_turn
from evoharness.teachers.clients.constrained import ActionConstraint, ActionSpace
from evoharness.teachers.clients.hf_batching import BatchGenerator, Sampling

PROMPTS = ["<think>I go to the countertop.</think>", "Task: put a clean mug in coffeemachine.",
           "You are in the middle of a room. Looking quickly around you, you see a cabinet 1, a fridge 1.",
           "recall [where to find apple]", "take apple 1 from countertop 1"]
COMMANDS = ("go to countertop 1", "go to cabinet 1", "go to cabinet 10", "take apple 1 from countertop 1", "look")
GREEDY = Sampling(max_new_tokens=12)


@pytest.fixture(scope="module")
def model_and_tokenizer(tmp_path_factory: pytest.TempPathFactory) -> tuple[Any, Any]:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from evoharness.testing.tiny_hf import build_tiny_qwen3

    folder = build_tiny_qwen3(tmp_path_factory.mktemp("tiny"))
    return AutoModelForCausalLM.from_pretrained(folder).eval(), AutoTokenizer.from_pretrained(folder)


@pytest.fixture()
def generator(model_and_tokenizer: tuple[Any, Any]) -> BatchGenerator:
    return BatchGenerator(*model_and_tokenizer, max_batch=4, engine="batch")


@pytest.fixture()
def continuous(model_and_tokenizer: tuple[Any, Any]) -> BatchGenerator:
    generator = BatchGenerator(*model_and_tokenizer, max_batch=2)
    assert generator.continuous_ready()
    return generator


def _ids(generator: BatchGenerator, text: str) -> list[int]:
    return generator.tokenizer(text)["input_ids"]


def _turn_prompts(generator: BatchGenerator) -> list[list[int]]:
    """Chat-templated prompts: they share the system turn (the continuous engine's prefix cache)."""
    return [generator.tokenizer.apply_chat_template(
        [{"role": "system", "content": "Household text game."}, {"role": "user", "content": text}],
        add_generation_prompt=True, tokenize=True, return_dict=True)["input_ids"] for text in PROMPTS]


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


@pytest.mark.parametrize("constrained", [False, True])
def test_the_continuous_engine_decodes_greedily_like_the_batch_engine(generator: BatchGenerator,
                                                                      continuous: BatchGenerator,
                                                                      constrained: bool) -> None:
    """Five turns through two slots (refilled as turns end, the shared prefix reused) against one padded batch."""
    prompts = _turn_prompts(generator)
    sampling = Sampling(max_new_tokens=48)

    def constraints() -> list[ActionConstraint | None]:
        return [ActionConstraint(generator.tokenizer, ActionSpace(COMMANDS, meta=i % 2 == 0)) if constrained
                else None for i in range(len(prompts))]

    expected = generator.run_batch(prompts, sampling, constraints())
    assert continuous.run_batch(prompts, sampling, constraints()) == expected

    async def play() -> list[list[int]]:
        return list(await asyncio.gather(*(continuous.generate(p, sampling, c)
                                           for p, c in zip(prompts, constraints(), strict=True))))

    assert asyncio.run(play()) == expected
    assert all(stats.prefix_reused > 0 for stats in continuous.decoder_stats)
    if constrained:
        assert all(parse_turn(generator.tokenizer.decode(c, skip_special_tokens=True)).error is None
                   for c in expected if c[-1] == generator.tokenizer.eos_token_id)


def test_a_finished_turn_s_slot_is_refilled_at_once(continuous: BatchGenerator) -> None:
    """Turns of 3, 9, 3, 9 and 3 tokens through two slots take as many steps as a first-come first-served schedule
    that refills a slot as soon as its turn ends (a padded batch waits for its longest turn)."""
    import torch

    from evoharness.teachers.clients.continuous import ContinuousDecoder, Row

    results: dict[int, list[int]] = {}
    waiting = [Row.of(p, Sampling(max_new_tokens=n), lambda r, i=i: results.__setitem__(i, r), None)
               for i, (p, n) in enumerate(zip(_turn_prompts(continuous), [3, 9, 3, 9, 3], strict=True))]
    decoder = ContinuousDecoder(continuous.model, continuous.tokenizer.eos_token_id, slots=2)
    with torch.no_grad():
        while waiting or decoder.rows:
            decoder.admit([waiting.pop(0) for _ in range(min(decoder.free, len(waiting)))])
            decoder.step()
    taken = [len(results[i]) for i in range(5)]
    free_at = [0, 0]  # the step at which each slot is free again
    for length in taken:
        slot = min(range(2), key=free_at.__getitem__)
        free_at[slot] += length
    assert decoder.stats.steps == max(free_at) < sum(taken)
    assert max(decoder.stats.rows_per_step) == 2 and len(set(taken)) > 1


def test_jump_forward_takes_the_forced_tokens_without_a_pass_each(continuous: BatchGenerator) -> None:
    """The tokens a constraint forces (``</action>`` and the end of turn after a complete command) are taken without
    asking the model: the same greedy completions, one pass fewer for each forced token (one slot: a pass a
    token)."""
    import torch

    from evoharness.teachers.clients.continuous import ContinuousDecoder, Row

    prompts = _turn_prompts(continuous)
    runs = {}
    for jump in (False, True):
        results: dict[int, list[int]] = {}
        waiting = [Row.of(p, Sampling(max_new_tokens=48), lambda r, i=i, got=results: got.__setitem__(i, r),
                          ActionConstraint(continuous.tokenizer, ActionSpace(COMMANDS, meta=i % 2 == 0)))
                   for i, p in enumerate(prompts)]
        decoder = ContinuousDecoder(continuous.model, continuous.tokenizer.eos_token_id, slots=1, jump_forward=jump)
        with torch.no_grad():
            while waiting or decoder.rows:
                decoder.admit([waiting.pop(0) for _ in range(min(decoder.free, len(waiting)))])
                decoder.step()
        runs[jump] = ([results[i] for i in range(len(prompts))], decoder.stats)
    (plain, plain_stats), (jumped, jumped_stats) = runs[False], runs[True]
    assert jumped == plain and plain_stats.forced == 0
    assert jumped_stats.forced >= len(prompts)  # at least each turn's end, forced after its closing tag
    assert jumped_stats.steps == plain_stats.steps - jumped_stats.forced


def test_extending_a_slot_by_several_tokens_equals_decoding_them_one_at_a_time(
        model_and_tokenizer: tuple[Any, Any]) -> None:
    """``Qwen3Runner.extend`` (rows of different token counts, packed) writes the keys and values and returns the
    logits that one-token decode steps give."""
    import torch

    from evoharness.teachers.clients.fast_decode import DecodeState, Qwen3Runner

    model, tokenizer = model_and_tokenizer
    prompts = [tokenizer(text)["input_ids"] for text in PROMPTS[:3]]
    runs = [[5, 9, 11], [7], [3, 4]]
    runner = Qwen3Runner(model)
    with torch.no_grad():
        last, keys = [], []
        for prompt, run in zip(prompts, runs, strict=True):  # each row alone, a token a pass
            single = DecodeState.empty(runner, 1, 64)
            runner.prefill(single, [0], [prompt])
            for token in run:
                logits = runner.decode(single, 1, torch.tensor([token]))
            last.append(logits[0])
            keys.append(single.keys[-1][0, :, :len(prompt) + len(run)])
        extended = DecodeState.empty(runner, 3, 64)
        runner.prefill(extended, [0, 1, 2], prompts)
        got = runner.extend(extended, runs)
    assert extended.lengths.tolist() == [len(k[0]) for k in keys]
    torch.testing.assert_close(got, torch.stack(last), atol=1e-4, rtol=1e-4)
    for slot, expected in enumerate(keys):
        torch.testing.assert_close(extended.keys[-1][slot, :, :expected.shape[1]], expected, atol=1e-5, rtol=1e-5)


def test_the_runner_scores_like_the_model_with_attention_biases(model_and_tokenizer: tuple[Any, Any]) -> None:
    """The stacked projections keep the model's biases (Qwen3's ``attention_bias``): prefill and decode logits equal
    the model's own forward pass."""
    import torch
    from transformers import Qwen3ForCausalLM

    from evoharness.teachers.clients.fast_decode import DecodeState, Qwen3Runner

    model, tokenizer = model_and_tokenizer
    config = model.config.__class__.from_dict(model.config.to_dict() | {"attention_bias": True})
    torch.manual_seed(0)
    biased = Qwen3ForCausalLM(config).eval()
    with torch.no_grad():
        for name, parameter in biased.named_parameters():
            if name.endswith("proj.bias"):
                parameter.normal_()
        prompt = tokenizer(PROMPTS[1])["input_ids"]
        expected = biased(torch.tensor([prompt + [7]])).logits[0, -2:]
        runner = Qwen3Runner(biased)
        state = DecodeState.empty(runner, 1, 64)
        first = runner.prefill(state, [0], [prompt])
        second = runner.decode(state, 1, torch.tensor([7]))
    assert runner.layers[0].qkv_bias is not None and runner.layers[0].out_bias is not None
    torch.testing.assert_close(torch.cat([first, second]), expected, atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("engine", ["batch", "continuous"])
def test_a_failed_batch_fails_every_waiting_request(model_and_tokenizer: tuple[Any, Any], engine: str) -> None:
    generator = BatchGenerator(*model_and_tokenizer, max_batch=4, engine=engine)  # type: ignore[arg-type]
    bad = Sampling(max_new_tokens=-1)

    async def play() -> list[object]:
        return list(await asyncio.gather(*(generator.generate(_ids(generator, p), bad) for p in PROMPTS[:2]),
                                         return_exceptions=True))

    results = asyncio.run(play())
    assert len(results) == 2 and all(isinstance(r, Exception) for r in results)
    assert asyncio.run(generator.generate(_ids(generator, PROMPTS[0]), GREEDY))  # and it still serves afterwards


def test_sampled_continuous_turns_keep_to_the_constraint(continuous: BatchGenerator) -> None:
    prompts = _turn_prompts(continuous)
    sampling = Sampling(max_new_tokens=200, temperature=1.0, top_p=0.9)
    constraints = [ActionConstraint(continuous.tokenizer, ActionSpace(COMMANDS, meta=False)) for _ in prompts]
    for completion in continuous.run_batch(prompts, sampling, list(constraints)):
        turn = parse_turn(continuous.tokenizer.decode(completion, skip_special_tokens=True))
        assert turn.error is None and turn.action in COMMANDS


def _generate_all(generator: BatchGenerator) -> list[list[int]]:
    async def play() -> list[list[int]]:
        return list(await asyncio.gather(*(generator.generate(p, GREEDY) for p in _turn_prompts(generator)[:3])))

    return asyncio.run(play())


def test_an_idle_worker_frees_its_decoder_before_it_counts_as_ended(continuous: BatchGenerator,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """A worker freeing tensors after it counts as ended can outlive the interpreter's shutdown (and abort it)."""
    import threading
    import time
    import weakref

    from evoharness.teachers.clients import hf_batching

    worker_alive_at_free: list[bool] = []
    make = continuous._decoder

    def tracked() -> Any:
        decoder = make()
        weakref.finalize(decoder, lambda: worker_alive_at_free.append(continuous._worker is not None))
        return decoder

    monkeypatch.setattr(continuous, "_decoder", tracked)
    monkeypatch.setattr(hf_batching, "IDLE_SECONDS", 0.05)
    _generate_all(continuous)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and any(t.name == "continuous-decoder" for t in threading.enumerate()):
        time.sleep(0.01)
    assert continuous._worker is None and worker_alive_at_free == [True]


def test_stopping_the_worker_waits_for_it_and_the_next_turn_starts_another(continuous: BatchGenerator) -> None:
    first = _generate_all(continuous)
    worker = continuous._worker
    assert worker is not None and worker.is_alive()
    continuous.stop_worker()
    assert not worker.is_alive() and continuous._worker is None
    assert _generate_all(continuous) == first
    continuous.stop_worker()


def test_a_bf16_runner_decodes_from_bf16_copies_and_scores_in_the_stored_precision(
        model_and_tokenizer: tuple[Any, Any]) -> None:
    """``compute_dtype="bfloat16"``: the layers and the key/value cache are bf16 copies (the model's own weights and
    rotary frequencies stay as stored), the logits come out in fp32 and close to the fp32 runner's, and a token decoded
    against the bf16 cache scores as the same token prefilled does."""
    import torch

    from evoharness.teachers.clients.fast_decode import DecodeState, Qwen3Runner

    model, tokenizer = model_and_tokenizer
    stored = {name: p.detach().clone() for name, p in model.named_parameters()}
    prompts = [tokenizer(text)["input_ids"] for text in PROMPTS[:3]]
    with torch.no_grad():
        runners = {dtype: Qwen3Runner(model, dtype) for dtype in (None, "bfloat16")}
        logits = {}
        for dtype, runner in runners.items():
            state = DecodeState.empty(runner, 4, 64)
            first = runner.prefill(state, [0, 1, 2], prompts)
            logits[dtype] = (first, runner.decode(state, 3, first.argmax(-1)))
        bf16 = runners["bfloat16"]
        whole = bf16.prefill(DecodeState.empty(bf16, 4, 64), [0, 1, 2],
                             [p + [int(t)] for p, t in zip(prompts, logits["bfloat16"][0].argmax(-1), strict=True)])
    weights = [getattr(bf16.layers[0], f.name) for f in fields(bf16.layers[0])]
    assert bf16.dtype == torch.bfloat16 and all(w.dtype == torch.bfloat16 for w in weights if torch.is_tensor(w))
    assert DecodeState.empty(bf16, 1, 8).keys[0].dtype == torch.bfloat16
    assert all(torch.equal(p, stored[name]) and p.dtype == torch.float32 for name, p in model.named_parameters())
    assert model.model.rotary_emb.inv_freq.dtype == torch.float32
    for full, low in zip(logits[None], logits["bfloat16"], strict=True):
        assert low.dtype == torch.float32
        assert 0 < (full - low).abs().max() < 0.05 * full.abs().max()
    assert (whole - logits["bfloat16"][1]).abs().max() < 0.05 * whole.abs().max()
    with pytest.raises(ValueError, match="not a torch dtype"):
        Qwen3Runner(model, "bf16")


def test_the_batch_engine_decodes_under_autocast_in_the_compute_dtype(model_and_tokenizer: tuple[Any, Any],
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """Where a model is not one the runner reproduces, ``compute_dtype`` reaches ``generate`` as autocast."""
    import torch

    model, tokenizer = model_and_tokenizer
    seen: list[tuple[bool, torch.dtype]] = []
    generate = model.generate

    def spying(*args: Any, **kwargs: Any) -> Any:
        seen.append((torch.is_autocast_enabled("cpu"), torch.get_autocast_dtype("cpu")))
        return generate(*args, **kwargs)

    monkeypatch.setattr(model, "generate", spying)
    prompts = [tokenizer(text)["input_ids"] for text in PROMPTS[:2]]
    for dtype in (None, "bfloat16"):
        completions = BatchGenerator(model, tokenizer, engine="batch", compute_dtype=dtype).run_batch(prompts, GREEDY)
        assert all(0 < len(c) <= GREEDY.max_new_tokens for c in completions)
    assert seen == [(False, seen[0][1]), (True, torch.bfloat16)]
    assert all(p.dtype == torch.float32 for p in model.parameters())
