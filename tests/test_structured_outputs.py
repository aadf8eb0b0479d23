"""The action constraint for served models: the turn grammar as EBNF, sent over real HTTP in the field of the
server's structured-output option, on every turn of a real game; and, where xgrammar (the engine vLLM and SGLang
compile it with) is installed, a grammar that accepts the turns the local constraint allows and nothing else."""

from __future__ import annotations

import asyncio
import os
import random
import re
from pathlib import Path

import pytest
from pydantic import ValidationError

from evoharness.collection import CollectionConfig, collect
from evoharness.teachers.clients import make_client
from evoharness.teachers.clients.constrained import ActionConstraint, ActionSpace
from evoharness.teachers.clients.structured import StructuredOutputs, turn_grammar
from evoharness.teachers.registry import TeacherSpec
from evoharness.testing.alfworld_player import WalkthroughPlayer
from evoharness.testing.loopback import LoopbackServer, Reply
from evoharness.testing.responders import Scripted
from evoharness.testing.teachers import loopback_teacher, write_registry
from evoharness.testing.tiny_hf import build_tiny_qwen3
from warehouse import Warehouse

REPO = Path(__file__).resolve().parents[1]
COMMANDS = ("go to countertop 1", "go to cabinet 1", "go to cabinet 10", "take apple 1 from countertop 1", "look")
MESSAGES = [{"role": "user", "content": "Task: put an apple on a table."}]


def served(server: LoopbackServer, engine: StructuredOutputs | None, name: str = "served") -> TeacherSpec:
    spec = loopback_teacher(name, "openai_compatible", server, api_key_env=None, price_in=0.0, price_out=0.0)
    return spec.model_copy(update={"constrain_actions": engine is not None, "structured_outputs": engine})


def one_call(engine: StructuredOutputs | None, space: ActionSpace | None) -> dict:
    with LoopbackServer(Scripted([Reply(text="<think>\nI look.\n</think>\n\n<action>look</action>")])) as server:
        client = make_client(served(server, engine))

        async def run() -> None:
            try:
                await client.complete(MESSAGES, max_tokens=32, temperature=None, action_space=space)
            finally:
                await client.aclose()  # type: ignore[attr-defined]

        asyncio.run(run())
        (call,) = server.calls
    return call.body


@pytest.mark.parametrize(("engine", "field"), [
    (StructuredOutputs.VLLM, lambda body: body["structured_outputs"]["grammar"]),
    (StructuredOutputs.VLLM_GUIDED, lambda body: body["guided_grammar"]),
    (StructuredOutputs.SGLANG, lambda body: body["ebnf"]),
])
def test_the_grammar_reaches_the_server_in_its_engines_field(engine: StructuredOutputs, field) -> None:
    body = one_call(engine, ActionSpace(COMMANDS, meta=True))
    grammar = field(body)
    assert grammar == turn_grammar(ActionSpace(COMMANDS, meta=True))
    assert all(f'"{command}"' in grammar for command in COMMANDS) and '"recall ["' in grammar


def test_a_turn_without_an_action_space_sends_no_grammar() -> None:
    body = one_call(StructuredOutputs.VLLM, None)
    assert not {"structured_outputs", "guided_grammar", "ebnf"} & set(body)


def test_an_action_space_without_structured_outputs_is_refused_not_dropped() -> None:
    with pytest.raises(ValueError, match="needs structured_outputs"):
        one_call(None, ActionSpace(COMMANDS))


@pytest.mark.parametrize(("update", "message"), [
    ({"provider": "openai", "api_key_env": "K", "constrain_actions": True}, "constrain_actions needs a local model"),
    ({"constrain_actions": True}, "constrain_actions needs a local model"),  # no structured outputs
    ({"structured_outputs": "vllm"}, "needs that provider and constrain_actions"),
    ({"provider": "local_hf", "base_url": None, "constrain_actions": True, "structured_outputs": "vllm"},
     "needs that provider"),
])
def test_a_constraint_the_teacher_cannot_carry_is_a_clear_error(update: dict, message: str) -> None:
    fields = {"name": "t", "provider": "openai_compatible", "model": "m", "base_url": "http://127.0.0.1:1/v1"}
    with pytest.raises(ValidationError, match=message):
        TeacherSpec(**(fields | update))


def test_every_turn_of_a_real_game_carries_its_admissible_commands(tmp_path: Path) -> None:
    """A constrained served teacher on real ALFWorld games: each request's grammar offers exactly the admissible
    commands the prompt lists, and the games are played as before."""
    os.environ.setdefault("ALFWORLD_DATA", str(REPO.parent / "shared" / "alfworld"))
    player = WalkthroughPlayer.for_split("valid_seen", 2)
    with LoopbackServer(player) as server:
        registry = write_registry(tmp_path / "teachers.yaml", served(server, StructuredOutputs.VLLM, "lb-vllm"))
        config = CollectionConfig(teacher="lb-vllm", split="valid_seen", limit=2, max_steps=30, engine="fast",
                                  teachers_file=str(registry))
        with Warehouse(tmp_path / "wh.duckdb") as wh:
            result = collect(config, wh, run_id="test-structured")
        calls = list(server.calls)
    assert result.written == 2 and result.won == 2
    assert len(calls) > 2
    for call in calls:  # the preflight's example turn included
        grammar = call.body["structured_outputs"]["grammar"]
        offered = set(re.findall(r'"([^"\\]+)"', grammar.split("action ::= ", 1)[1].split(" | (", 1)[0]))
        listed = re.search(r"Admissible commands:\n(.*)", call.messages[-1]["content"])
        assert offered and listed is not None
        assert offered == {c.strip() for c in listed.group(1).split(",")}, (offered, listed.group(1))


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory: pytest.TempPathFactory):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(build_tiny_qwen3(tmp_path_factory.mktemp("tok")))


@pytest.mark.parametrize("meta", [True, False])
def test_xgrammar_accepts_what_the_local_constraint_allows_and_no_other_command(tokenizer, meta: bool) -> None:
    xgr = pytest.importorskip("xgrammar")
    space = ActionSpace(COMMANDS, meta=meta)
    info = xgr.TokenizerInfo.from_huggingface(tokenizer, stop_token_ids=[tokenizer.eos_token_id])
    compiled = xgr.GrammarCompiler(info, max_threads=1).compile_grammar(turn_grammar(space))
    rng = random.Random(0)
    whole = {t for t in range(len(tokenizer)) if "\ufffd" not in tokenizer.decode([t])}
    for _ in range(20):  # random walks through the local constraint: every token also passes xgrammar
        constraint, matcher, generated = ActionConstraint(tokenizer, space), xgr.GrammarMatcher(compiled), []
        while not generated or generated[-1] != tokenizer.eos_token_id:
            # text in whole characters: xgrammar holds free text to UTF-8, the local trie lets a lone byte through
            token = rng.choice([t for t in constraint.allowed(generated) if t in whole])
            assert matcher.accept_token(token), tokenizer.decode([*generated, token])
            generated.append(token)
        assert matcher.is_terminated()
    outside = tokenizer.encode("<think>\nI go.\n</think>\n\n<action>go to fridge 1</action>", add_special_tokens=False)
    matcher = xgr.GrammarMatcher(compiled)
    assert not all(matcher.accept_token(token) for token in outside)  # a command the game does not offer


@pytest.mark.parametrize(("action", "passes"), [("fly to the moon", False), ("look", True)])
def test_a_server_that_ignores_the_grammar_fails_the_preflight(action: str, passes: bool) -> None:
    from evoharness.teachers.preflight import run_preflight
    from evoharness.teachers.registry import TeacherRegistry

    reply = Reply(text=f"<think>\nI act.\n</think>\n\n<action>{action}</action>")
    with LoopbackServer(Scripted([reply])) as server:
        spec = served(server, StructuredOutputs.VLLM)
        result = run_preflight(spec.name, registry=TeacherRegistry([spec]))
        (call,) = server.calls
    assert "structured_outputs" in call.body  # the preflight sends the grammar as every turn will
    assert result.ok is passes, result.message
    assert passes or "does not enforce structured outputs of kind vllm" in result.message
