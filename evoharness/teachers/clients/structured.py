"""The action constraint for a served model: the turn grammar of :mod:`.constrained` as EBNF, sent through the
server's structured-output option, so a student served by vLLM or SGLang decodes as it does in this process.

Both servers compile the grammar with xgrammar (vLLM also accepts its other backends). It is the grammar the local
trie holds a turn to — ``<think>\n`` one line of thought ``\n</think>\n\n<action>``, then one admissible command or
a meta-action opener with its free argument up to ``]``, then ``</action>`` — with two differences: free text is held
to whole UTF-8 characters (the trie lets a lone byte through), and the length limits are in characters, with
:data:`TOKEN_SLACK_CHARS` to spare (the trie forces a close once a thought or an argument is past its limit, however
long the last token). So every turn the local constraint allows, the grammar allows (tests/test_structured_outputs),
and a served thought or argument cannot run on to the request's max_tokens.
It assumes the server returns the thought in the content (no reasoning parser that splits it off first).
"""

from __future__ import annotations

import json
from enum import StrEnum
from typing import Any

from evoharness.harness.grammar import META_ACTIONS
from evoharness.teachers.clients.constrained import (
    ACTION_CLOSE,
    MAX_ARGUMENT_CHARS,
    MAX_THOUGHT_CHARS,
    THINK_OPEN,
    THINK_TO_ACTION,
    ActionSpace,
)

TOKEN_SLACK_CHARS = 32
"""How far past the local limits a served thought or argument may run: the trie lets the token that crosses a limit
through whole, and a student tokenizer's longest piece is 18 characters (the `small` recipe's 1,024 tokens)."""


class StructuredOutputs(StrEnum):
    """The request field that carries a grammar to an OpenAI-compatible server's structured-output engine."""

    VLLM = "vllm"  # vLLM >= 0.10.2: {"structured_outputs": {"grammar": ...}}
    VLLM_GUIDED = "vllm-guided"  # older vLLM: {"guided_grammar": ...}
    SGLANG = "sglang"  # SGLang: {"ebnf": ...}


def _literal(text: str) -> str:
    return json.dumps(text)  # EBNF string literals take JSON's escapes


def turn_grammar(space: ActionSpace) -> str:
    """The turn grammar over ``space`` as EBNF (xgrammar's dialect, rooted at ``root``)."""
    actions = [_literal(command) for command in space.commands]
    if space.meta:
        openers = " | ".join(_literal(f"{kind.value} [") for kind in META_ACTIONS)
        actions.append(f'({openers}) [^<\\n]{{0,{MAX_ARGUMENT_CHARS + TOKEN_SLACK_CHARS}}} "]"')
    return (f"root ::= {_literal(THINK_OPEN)} thought {_literal(THINK_TO_ACTION)} action {_literal(ACTION_CLOSE)}\n"
            f"thought ::= [^<\\n]{{1,{MAX_THOUGHT_CHARS + TOKEN_SLACK_CHARS}}}\n"
            f"action ::= {' | '.join(actions)}\n")


def structured_outputs_body(engine: StructuredOutputs, space: ActionSpace) -> dict[str, Any]:
    """The extra request body that holds a completion to ``space`` on a server of ``engine``'s kind."""
    grammar = turn_grammar(space)
    if engine is StructuredOutputs.VLLM:
        return {"structured_outputs": {"grammar": grammar}}
    if engine is StructuredOutputs.VLLM_GUIDED:
        return {"guided_grammar": grammar}
    return {"ebnf": grammar}
