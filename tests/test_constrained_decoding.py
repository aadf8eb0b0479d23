"""Constrained decoding: a random model's turns always parse, and its actions are admissible or meta-actions."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from evoharness.harness.grammar import ActionKind, parse_turn
from evoharness.teachers.clients.constrained import ActionConstraint, ActionSpace, RepeatGuard
from evoharness.testing.tiny_hf import build_tiny_qwen3

COMMANDS = ("go to countertop 1", "go to cabinet 1", "go to cabinet 10", "take apple 1 from countertop 1", "look")


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory: pytest.TempPathFactory):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(build_tiny_qwen3(tmp_path_factory.mktemp("tok")))


def _random_turn(tokenizer, space: ActionSpace, rng: random.Random, limit: int = 400) -> str:
    """Decode by picking uniformly among the allowed tokens: the worst student the constraint can meet."""
    constraint, generated = ActionConstraint(tokenizer, space), []
    while len(generated) < limit:
        token = rng.choice(constraint.allowed(generated))
        generated.append(token)
        if token == tokenizer.eos_token_id:
            break
    return tokenizer.decode(generated, skip_special_tokens=True)


@pytest.mark.parametrize("meta", [True, False])
def test_any_path_through_the_constraint_is_a_valid_turn(tokenizer, meta: bool) -> None:
    rng = random.Random(0)
    kinds = set()
    for _ in range(40):
        turn = parse_turn(_random_turn(tokenizer, ActionSpace(COMMANDS, meta=meta), rng))
        assert turn.error is None, turn
        assert turn.kind is not ActionKind.ENV or turn.action in COMMANDS
        assert meta or turn.kind is ActionKind.ENV
        kinds.add(turn.kind)
    assert ActionKind.ENV in kinds and (not meta or len(kinds) > 1)


def test_the_action_follows_only_admissible_continuations(tokenizer) -> None:
    constraint = ActionConstraint(tokenizer, ActionSpace(COMMANDS, meta=False))
    prefix = tokenizer.encode("<think>\nI search.\n</think>\n\n<action>go to cabinet", add_special_tokens=False)
    continuations = {tokenizer.decode([t]) for t in constraint.allowed(prefix)}
    assert continuations and all(c.strip() in {"1", "10"} or "1" in c for c in continuations)
    done = tokenizer.encode("<think>\nI search.\n</think>\n\n<action>look</action>", add_special_tokens=False)
    assert constraint.allowed(done) == [tokenizer.eos_token_id]
    assert tokenizer.eos_token_id not in constraint.allowed(tokenizer.encode("<think>\nI", add_special_tokens=False))


@pytest.mark.parametrize("text", ["", "<th", "<think>\n", "<think>\n ", "<think>\nI", "<think>\nI go to the fridge 1",
                                  "<think>\nI go.\n", "<think>\nI go.\n</thi", "<think>\nI go.\n</think>\n\n<act"])
def test_the_tokens_allowed_before_the_action_are_those_the_grammar_accepts(tokenizer, text: str) -> None:
    """The cached lists a thought reuses equal filtering the whole vocabulary through the grammar."""
    from evoharness.teachers.clients.constrained import _grammatical

    constraint = ActionConstraint(tokenizer, ActionSpace(COMMANDS))
    pieces = [tokenizer.decode([t], skip_special_tokens=False) for t in range(len(tokenizer))]
    grammatical = {t for t, piece in enumerate(pieces) if piece and _grammatical(text + piece)}
    allowed = constraint.allowed(tokenizer.encode(text, add_special_tokens=False))
    assert grammatical and set(allowed) == grammatical and len(allowed) == len(grammatical)


@pytest.mark.parametrize("argument", ["", "where", "the apple]", "a] b", "apple 1 ]", "apple]</act", "apple]<"])
def test_the_tokens_allowed_in_an_argument_are_those_it_accepts(tokenizer, argument: str) -> None:
    """The two cached lists a meta-action's argument reuses equal filtering the whole vocabulary."""
    from evoharness.teachers.clients.constrained import _argument_ok

    constraint = ActionConstraint(tokenizer, ActionSpace(COMMANDS))
    pieces = [tokenizer.decode([t], skip_special_tokens=False) for t in range(len(tokenizer))]
    accepted = {t for t, piece in enumerate(pieces) if piece and t != tokenizer.eos_token_id
                and _argument_ok(argument + piece)}
    head = tokenizer.encode("<think>\nI look.\n</think>\n\n<action>recall [", add_special_tokens=False)
    allowed = constraint.allowed(head + tokenizer.encode(argument, add_special_tokens=False))
    assert accepted and set(allowed) == accepted and len(allowed) == len(accepted)


def test_choices_mark_the_tokens_that_had_an_alternative(tokenizer) -> None:
    """Free thought tokens and the pick between commands are choices; a command's forced tail is not."""
    constraint = ActionConstraint(tokenizer, ActionSpace(COMMANDS, meta=False))
    head = tokenizer.encode("<think>\nI search.\n</think>\n\n<action>", add_special_tokens=False)
    turn = head + tokenizer.encode("take apple 1 from countertop 1</action>", add_special_tokens=False) + [
        tokenizer.eos_token_id]
    choices = constraint.choices(turn)
    assert len(choices) == len(turn)
    assert choices[len(head)]  # which command: a choice
    assert not any(choices[len(head) + 1:])  # only one command starts with "take": the rest is forced
    assert choices == [len(constraint.allowed(turn[:i])) > 1 for i in range(len(turn))]
    assert any(choices[:len(head)])  # the thought is free text


def test_an_action_space_reaches_a_local_client_through_the_runner(tmp_path: Path) -> None:
    import asyncio

    from evoharness.teachers.clients.local_hf import LocalHFClient

    client = LocalHFClient(str(build_tiny_qwen3(tmp_path / "m")))
    messages = [{"role": "system", "content": "s"}, {"role": "user", "content": "Task: put an apple on a table."}]
    completion = asyncio.run(client.complete(messages, max_tokens=256, temperature=None,
                                             action_space=ActionSpace(COMMANDS, meta=False)))
    turn = parse_turn(completion.text)
    assert turn.error is None and turn.action in COMMANDS


def test_a_repeat_guard_leaves_out_commands_issued_in_the_same_state() -> None:
    guard, here = RepeatGuard(), "You arrive at countertop 1."
    guard.record("<think>\nlook there\n</think>\n\n<action>go to cabinet 1</action>", here, COMMANDS)
    guard.record("<think>\nwhere\n</think>\n\n<action>track [apple]</action>", here, COMMANDS)
    assert guard.commands(COMMANDS, here) == tuple(c for c in COMMANDS if c != "go to cabinet 1")
    assert guard.commands(COMMANDS, "You arrive at cabinet 1.") == COMMANDS  # another observation: all new
    holding = (*COMMANDS, "move apple 1 to countertop 1")  # the same observation, holding something: a new state
    assert guard.commands(holding, here) == holding
    guard.record("<think>\nagain\n</think>\n\n<action>go to cabinet 1</action>", here, ("go to cabinet 1",))
    assert guard.commands(("go to cabinet 1",), here) == ("go to cabinet 1",)  # none left: all stay allowed


@pytest.mark.parametrize("avoid_repeats", [False, True])
def test_a_student_avoiding_repeats_never_repeats_a_command_in_a_state(tmp_path: Path,
                                                                              avoid_repeats: bool) -> None:
    """An untrained model decoded greedily loops; with avoid_repeats it never issues a command twice in one state
    (observation and admissible commands, checked by replaying its commands)."""
    from evoharness.collection import CollectionConfig, collect
    from evoharness.envs.alfworld import GameCatalog
    from evoharness.harness.prompts import Mode
    from evoharness.teachers.registry import Provider, TeacherSpec
    from evoharness.testing.replay import state_repeats
    from evoharness.testing.teachers import write_registry
    from warehouse import Warehouse

    spec = TeacherSpec(name="tiny-guarded", provider=Provider.LOCAL_HF, model=str(build_tiny_qwen3(tmp_path / "m")),
                       price_in=0.0, price_out=0.0, max_tokens=256, mode=Mode.REACT, constrain_actions=True,
                       avoid_repeats=avoid_repeats)
    config = CollectionConfig(teacher=spec.name, mode=Mode.REACT, split="valid_seen", limit=1, max_steps=25,
                              engine="fast", teachers_file=str(write_registry(tmp_path / "teachers.yaml", spec)))
    with Warehouse(tmp_path / "wh.duckdb") as wh:
        collect(config, wh, run_id="guard")
        game_id, seed, repeats = wh.con.execute("SELECT e.game_id, e.seed, r.repeats FROM episodes e "
                                                "JOIN episode_repeats r USING (episode_id)").fetchone()
        steps = wh.con.execute("SELECT kind, action FROM steps ORDER BY t").fetchall()
    assert len(steps) == 25
    in_state = state_repeats(GameCatalog().get(game_id), seed, steps)
    assert (in_state == 0) if avoid_repeats else (in_state > 0 and repeats >= in_state)


@pytest.mark.parametrize("meta", [True, False])
def test_a_walk_token_by_token_allows_what_the_whole_completion_allows(tokenizer, meta: bool) -> None:
    """The incremental state (and its mask) gives the same tokens as ``allowed`` on the completion so far, on
    random walks through the constraint (thought, command or meta-action argument, end)."""
    rng, eos = random.Random(1), tokenizer.eos_token_id
    for _ in range(20):
        constraint = ActionConstraint(tokenizer, ActionSpace(COMMANDS, meta=meta))
        state, generated = constraint.start(), []
        while not generated or generated[-1] != eos:
            allowed = constraint.allowed(generated)
            assert state.allowed() == allowed
            assert state.forced() == (allowed[0] if len(allowed) == 1 else None)
            assert set((~state.blocked(len(tokenizer))).nonzero().flatten().tolist()) == set(allowed)
            token = rng.choice(allowed)
            generated.append(token)
            state.advance(token)
        assert parse_turn(tokenizer.decode(generated, skip_special_tokens=True)).error is None
