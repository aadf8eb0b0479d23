"""The action constraint for a served model: the turn grammar of :mod:`.constrained` as EBNF, sent through the
server's structured-output option, so a student served by vLLM or SGLang decodes as it does in this process.

Both servers compile the grammar with xgrammar (vLLM also accepts its other backends). It is the grammar the local
trie holds a turn to — ``<think>\n`` one line of thought ``\n</think>\n\n<action>``, then one admissible command or
a meta-action opener with its free argument up to ``]``, then ``</action>`` — with two differences: free text is held
to whole UTF-8 characters (the trie lets a lone byte through), and the trie's length limits are left out (it forces
a close once a thought or an argument is past its limit, however long the last token; the request's max_tokens
bounds a served turn). So every turn the local constraint allows, the grammar allows (tests/test_structured_outputs).
It assumes the server returns the thought in the content (no reasoning parser that splits it off first).
"""

from __future__ import annotations

import json
from enum import StrEnum
from typing import Any

from evoharness.harness.grammar import META_ACTIONS
from evoharness.teachers.clients.constrained import (
    ACTION_CLOSE,
    THINK_OPEN,
    THINK_TO_ACTION,
    ActionSpace,
)


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
        actions.append(f'({openers}) [^<\\n]* "]"')
    return (f"root ::= {_literal(THINK_OPEN)} thought {_literal(THINK_TO_ACTION)} action {_literal(ACTION_CLOSE)}\n"
            "thought ::= [^<\\n]+\n"
            f"action ::= {' | '.join(actions)}\n")


def structured_outputs_body(engine: StructuredOutputs, space: ActionSpace) -> dict[str, Any]:
    """The extra request body that holds a completion to ``space`` on a server of ``engine``'s kind."""
    grammar = turn_grammar(space)
    if engine is StructuredOutputs.VLLM:
        return {"structured_outputs": {"grammar": grammar}}
    if engine is StructuredOutputs.VLLM_GUIDED:
        return {"guided_grammar": grammar}
    return {"ebnf": grammar}
