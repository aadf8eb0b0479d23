"""The engine server (``evoharness serve --server evoharness``): a request's grammar, compiled by xgrammar, holds
the completion to the turns the local constraint allows; requests it cannot answer as asked get HTTP 400 with a
one-line reason, through the real ``openai`` SDK over real HTTP."""

from __future__ import annotations

import asyncio
import random
from collections.abc import Iterator
from pathlib import Path

import openai
import pytest

from evoharness.serving import ServedModel, ServeSettings, missing_serve_modules
from evoharness.teachers.clients.base import PermanentError
from evoharness.teachers.clients.constrained import ActionConstraint, ActionSpace
from evoharness.teachers.clients.grammar_constraint import GrammarCompilers, GrammarError
from evoharness.teachers.clients.openai_client import OpenAIChatClient
from evoharness.teachers.clients.structured import StructuredOutputs, turn_grammar
from evoharness.testing.tiny_hf import build_tiny_qwen3

pytestmark = pytest.mark.skipif(bool(missing_serve_modules("evoharness")), reason="needs the serve extra")

COMMANDS = ("go to countertop 1", "go to cabinet 1", "go to cabinet 10", "take apple 1 from countertop 1", "look")
MESSAGES = [{"role": "user", "content": "Task: put an apple on a table."}]


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tiny_qwen3(tmp_path_factory.mktemp("engine-server") / "model")


@pytest.fixture(scope="module")
def served(model_dir: Path) -> Iterator[ServedModel]:
    with ServedModel(model_dir, ServeSettings(server="evoharness", log_path=model_dir.parent / "serve.log")) as s:
        yield s


@pytest.mark.parametrize("meta", [True, False])
def test_the_grammar_allows_every_turn_the_local_constraint_allows(model_dir: Path, meta: bool) -> None:
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    space = ActionSpace(COMMANDS, meta=meta)
    grammar = GrammarCompilers(tokenizer, len(tokenizer)).constraint(turn_grammar(space))
    rng = random.Random(0)
    whole = {t for t in range(len(tokenizer)) if "\ufffd" not in tokenizer.decode([t])}  # xgrammar: whole UTF-8
    for _ in range(20):  # random walks through the local trie: the grammar's mask never blocks their tokens
        local, walk, generated = ActionConstraint(tokenizer, space), grammar.start(), []
        while not generated or generated[-1] != tokenizer.eos_token_id:
            token = rng.choice([t for t in local.allowed(generated) if t in whole])
            assert not walk.blocked(len(tokenizer))[token], tokenizer.decode([*generated, token])
            walk.advance(token)
            generated.append(token)
        assert walk.allowed() == [tokenizer.eos_token_id]  # the turn is over: only the end-of-turn token
    outside = tokenizer.encode("<think>\nI go.\n</think>\n\n<action>go to fridge 1</action>", add_special_tokens=False)
    walk, prefix = grammar.start(), []
    for token in outside:  # a command the game does not offer: blocked once it leaves every admissible one
        if walk.blocked(len(tokenizer))[token]:
            break
        walk.advance(token)
        prefix.append(token)
    assert tokenizer.decode(prefix).endswith("<action>go to") and prefix != outside
    with pytest.raises(GrammarError, match="outside the grammar"):
        walk.advance(token)


def complete(served: ServedModel, **kwargs: object) -> str:
    client = OpenAIChatClient(served.model, None, base_url=served.base_url, token_param="max_tokens",
                              provider="openai_compatible", structured_outputs=StructuredOutputs.VLLM)

    async def run() -> str:
        try:
            return (await client.complete(MESSAGES, max_tokens=24, temperature=None, **kwargs)).text  # type: ignore[arg-type]
        finally:
            await client.aclose()

    return asyncio.run(run())


def test_a_served_turn_keeps_to_its_grammar_and_a_free_one_does_not_have_to(served: ServedModel) -> None:
    constrained = complete(served, action_space=ActionSpace(COMMANDS))
    free = complete(served)
    assert constrained.startswith("<think>\n")  # the grammar's opening, whatever the untrained model prefers
    assert not free.startswith("<think>\n")  # the tiny untrained model's own greedy choice differs


def test_a_grammar_that_does_not_compile_is_a_one_line_400(served: ServedModel) -> None:
    sdk = openai.OpenAI(api_key="none", base_url=served.base_url, max_retries=0)
    with pytest.raises(openai.BadRequestError) as caught:
        sdk.chat.completions.create(model=served.model, messages=MESSAGES, max_tokens=8,  # type: ignore[arg-type]
                                    extra_body={"structured_outputs": {"grammar": "root ::= undefined_rule"}})
    message = caught.value.body["message"]  # type: ignore[index]
    assert "does not compile" in message and "\n" not in message
    with pytest.raises(openai.BadRequestError, match="only grammar"):
        sdk.chat.completions.create(model=served.model, messages=MESSAGES, max_tokens=8,  # type: ignore[arg-type]
                                    extra_body={"structured_outputs": {"regex": "a+"}})
    with pytest.raises(openai.BadRequestError, match="not served here"):
        sdk.chat.completions.create(model="another", messages=MESSAGES, max_tokens=8)  # type: ignore[arg-type]
    with pytest.raises(openai.BadRequestError, match="stream is not supported"):
        sdk.chat.completions.create(model=served.model, messages=MESSAGES, max_tokens=8, stream=True)  # type: ignore[arg-type]
    assert [m.id for m in sdk.models.list()] == [served.model]


def test_the_teacher_client_gets_the_400_as_a_permanent_error(served: ServedModel) -> None:
    client = OpenAIChatClient("another", None, base_url=served.base_url, token_param="max_tokens",
                              provider="openai_compatible")

    async def run() -> None:
        try:
            await client.complete(MESSAGES, max_tokens=8, temperature=None)
        finally:
            await client.aclose()

    with pytest.raises(PermanentError, match="400"):
        asyncio.run(run())
