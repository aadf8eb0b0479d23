"""The turn grammar parser: valid turns, malformed output, mixed cases."""

import pytest

from evoharness.harness.grammar import ActionKind, format_meta, format_turn, parse_turn


@pytest.mark.parametrize(
    ("text", "kind", "action", "argument"),
    [
        ("<think>go</think><action>go to countertop 1</action>", ActionKind.ENV, "go to countertop 1", "go to countertop 1"),
        ("<think>x</think><action>  Go   to  Fridge 1 </action>", ActionKind.ENV, "go to fridge 1", "go to fridge 1"),
        ("<think>q</think><action>track [apple]</action>", ActionKind.TRACK, "track [apple]", "apple"),
        ("<think>q</think><action>commit [heat the apple]</action>", ActionKind.COMMIT, "commit [heat the apple]", "heat the apple"),
        ("<think>q</think><action>recall where is a mug</action>", ActionKind.RECALL, "recall where is a mug", "where is a mug"),
        ("<think>q</think><action>note [apples are in the fridge]</action>", ActionKind.NOTE,
         "note [apples are in the fridge]", "apples are in the fridge"),
        ("<think>q</think><action>track</action>", ActionKind.TRACK, "track", ""),
        ("<action>look</action>", ActionKind.ENV, "look", "look"),
        ("Sure! <think>plan</think>\n<action>inventory</action>\n", ActionKind.ENV, "inventory", "inventory"),
    ],
)
def test_valid_turns(text: str, kind: ActionKind, action: str, argument: str) -> None:
    turn = parse_turn(text)
    assert turn.error is None
    assert (turn.kind, turn.action, turn.argument) == (kind, action, argument)


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("", "empty output"),
        ("   ", "empty output"),
        ("go to fridge 1", "missing <action>"),
        ("<think>a</think><action>go to fridge 1", "unclosed <action> tag"),
        ("<think>a</think><action>look</action><action>inventory</action>", "2 actions in one turn"),
        ("<think>a</think><think>b</think><action>look</action>", "2 <think> blocks in one turn"),
        ("<think>a</think><action>look</action> and then inventory", "text after </action>"),
        ("<think>a</think> so <action>look</action>", "text between </think> and <action>"),
        ("<action>look</action><think>a</think>", "text after </action>"),
        ("<think>a</think><action>   </action>", "empty action"),
        ("<think>a</think><action>look\ninventory</action>", "multi-line action"),
    ],
)
def test_malformed_turns_are_invalid_with_reason(text: str, reason: str) -> None:
    turn = parse_turn(text)
    assert turn.kind is ActionKind.INVALID
    assert turn.error is not None and reason in turn.error


def test_mixed_think_is_kept_for_invalid_turns() -> None:
    turn = parse_turn("<think>I need the apple</think><action>take apple 1</action><action>look</action>")
    assert turn.kind is ActionKind.INVALID
    assert turn.think == "I need the apple"
    assert turn.action == "take apple 1"


def test_format_round_trip() -> None:
    for kind, argument in [(ActionKind.COMMIT, "take the mug"), (ActionKind.TRACK, "")]:
        turn = parse_turn(format_turn("why", format_meta(kind, argument)))
        assert (turn.kind, turn.argument, turn.think) == (kind, argument, "why")
    assert parse_turn(format_turn("t", "open drawer 1")).action == "open drawer 1"
