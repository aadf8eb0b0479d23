"""The turn grammar ``<think>…</think><action>…</action>`` and its parser.

A turn's action is either an environment command, one of the four meta-actions
(``track``, ``commit``, ``recall``, ``note``) with an optional argument, or invalid.
Invalid turns are data (kind ``invalid`` with a reason), never exceptions.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import StrEnum


class ActionKind(StrEnum):
    """What a parsed turn asks for."""

    ENV = "env"
    TRACK = "track"
    COMMIT = "commit"
    RECALL = "recall"
    NOTE = "note"
    INVALID = "invalid"


META_ACTIONS: tuple[ActionKind, ...] = (ActionKind.TRACK, ActionKind.COMMIT, ActionKind.RECALL, ActionKind.NOTE)
_META_BY_VERB = {kind.value: kind for kind in META_ACTIONS}

_THINK_RE = re.compile(r"<think>(.*?)</think>", re.DOTALL)
_ACTION_RE = re.compile(r"<action>(.*?)</action>", re.DOTALL)
_META_RE = re.compile(r"^(track|commit|recall|note)\b\s*(?:\[(.*)\]|(.*))$", re.DOTALL | re.IGNORECASE)


@dataclass(frozen=True)
class ParsedTurn:
    """One model turn, parsed. ``action`` is normalised (lower case, single spaces)."""

    kind: ActionKind
    think: str
    action: str
    argument: str
    error: str | None = None

    @property
    def is_meta(self) -> bool:
        return self.kind in META_ACTIONS


def format_turn(think: str, action: str) -> str:
    """Render a turn in the grammar (the exact inverse of :func:`parse_turn` for valid turns)."""
    return f"<think>{think}</think><action>{action}</action>"


def format_meta(kind: ActionKind, argument: str) -> str:
    """The action text of a meta-action, e.g. ``commit [take apple 1]``."""
    return f"{kind.value} [{argument}]" if argument else kind.value


def _normalise(text: str) -> str:
    return " ".join(text.strip().split()).lower()


def _invalid(think: str, action: str, reason: str) -> ParsedTurn:
    return ParsedTurn(ActionKind.INVALID, think, action, "", reason)


def parse_turn(text: str) -> ParsedTurn:
    """Parse a raw model output.

    Rules: exactly one ``<action>`` block; at most one ``<think>`` block, which must come before the
    action; nothing but whitespace after ``</action>``. Text before ``<think>`` is tolerated (models
    often emit a preamble) but text between ``</think>`` and ``<action>`` is not.
    """
    if not text or not text.strip():
        return _invalid("", "", "empty output")
    actions = list(_ACTION_RE.finditer(text))
    thinks = list(_THINK_RE.finditer(text))
    think = thinks[0].group(1).strip() if thinks else ""
    if not actions:
        reason = "unclosed <action> tag" if "<action>" in text else "missing <action>…</action>"
        return _invalid(think, "", reason)
    if len(actions) > 1:
        return _invalid(think, _normalise(actions[0].group(1)), f"{len(actions)} actions in one turn")
    if len(thinks) > 1:
        return _invalid(think, _normalise(actions[0].group(1)), f"{len(thinks)} <think> blocks in one turn")
    action_match = actions[0]
    action = _normalise(action_match.group(1))
    if text[action_match.end():].strip():
        return _invalid(think, action, "text after </action>")
    if thinks:
        between = text[thinks[0].end(): action_match.start()]
        if thinks[0].start() > action_match.start():
            return _invalid(think, action, "<think> after <action>")
        if between.strip():
            return _invalid(think, action, "text between </think> and <action>")
    if not action:
        return _invalid(think, action, "empty action")
    if "\n" in action_match.group(1).strip():
        return _invalid(think, action, "multi-line action")
    meta = _META_RE.match(action)
    if meta:
        kind = _META_BY_VERB[meta.group(1).lower()]
        argument = _normalise(meta.group(2) if meta.group(2) is not None else meta.group(3) or "")
        return ParsedTurn(kind, think, action, argument)
    return ParsedTurn(ActionKind.ENV, think, action, action)
