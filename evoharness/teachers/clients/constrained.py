"""Grammar- and action-constrained decoding for local students: one thought, then only what the game accepts.

A completion is held to the turn grammar as chat templates render it (Qwen3: ``<think>\n`` one line of
thought ``\n</think>\n\n<action>`` …): the thought is free text on one line without tags, and once
``<action>`` has been written every next token must continue one of the admissible commands (then
``</action>`` and the end-of-turn token) or, where meta-actions are allowed, one of ``track [``,
``commit [``, ``recall [``, ``note [`` followed by a free argument up to ``]</action>``. A student can then
never lose a step to a malformed turn or a misspelt command; which command it picks is still entirely its
own (greedy, or sampled from its distribution over the allowed tokens).

Byte-level BPE never merges across the ``>`` of ``<action>`` and a following letter, nor across a digit and
``</``, so a command's tokens in context equal the tokens of the command alone; that is what the trie holds.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

from evoharness.harness.grammar import META_ACTIONS, ActionKind, parse_turn

ACTION_OPEN, ACTION_CLOSE = "<action>", "</action>"
THINK_OPEN = "<think>\n"
THINK_TO_ACTION = "\n</think>\n\n" + ACTION_OPEN
MAX_THOUGHT_CHARS = 160
"""A thought is one short line (the teachers' are under 120 characters); past this it must close."""
MAX_ARGUMENT_CHARS = 80
"""A meta-action's argument (a subgoal, a query, a lesson) past this is closed."""
ENCODED_CACHE = 100_000
"""Command texts whose token ids a vocabulary keeps (cleared when full)."""


class ConstraintWalk(Protocol):
    """One completion's walk through a constraint, as the continuous decoder drives it."""

    def advance(self, token: int) -> None: ...

    def blocked(self, width: int) -> Any: ...

    def forced(self) -> int | None: ...


class TokenConstraint(Protocol):
    """What the decoding engines hold a completion to: this module's :class:`ActionConstraint`, or a request's
    grammar (:mod:`.grammar_constraint`)."""

    def start(self) -> ConstraintWalk: ...

    def allowed(self, generated: list[int]) -> list[int]: ...


@dataclass(frozen=True)
class ActionSpace:
    """What a turn may do: the admissible environment commands and whether meta-actions are allowed."""

    commands: tuple[str, ...]
    meta: bool = True


@dataclass
class RepeatGuard:
    """One episode's environment commands by the state they were issued in, to leave out of the next turn's action
    space those that would repeat. A state is the environment's last observation *and* its admissible commands:
    the observation alone ("You arrive at microwave 1. The microwave 1 is closed.") is the same before and after
    the agent picked up what it came to put there, the commands are not ("move apple 1 to microwave 1"). When
    every admissible command would repeat, all stay allowed."""

    issued: set[tuple[str, str, frozenset[str]]] = field(default_factory=set)

    def commands(self, admissible: tuple[str, ...], observation: str) -> tuple[str, ...]:
        """The admissible commands not yet issued in this state (all of them if none is left)."""
        state = frozenset(admissible)
        fresh = tuple(c for c in admissible if (c, observation, state) not in self.issued)
        return fresh or admissible

    def record(self, completion: str, observation: str, admissible: tuple[str, ...]) -> None:
        """Remember the environment command ``completion`` issued in this state (other turns are not kept)."""
        turn = parse_turn(completion)
        if turn.kind is ActionKind.ENV:
            self.issued.add((turn.action, observation, frozenset(admissible)))


@dataclass(eq=False)
class _Trie:
    children: dict[int, _Trie] = field(default_factory=dict)
    free_after: bool = False  # a meta-action opener ends here: its argument is free text
    _next: list[int] | None = None
    _blocked: Any = None

    def next_tokens(self, eos: int) -> list[int]:
        """The tokens that continue a command here (the end-of-turn token where none does), built once."""
        if self._next is None:
            self._next = list(self.children) or [eos]
        return self._next

    def blocked(self, eos: int, width: int) -> Any:
        """:meth:`next_tokens` as a mask of the tokens not allowed (built once; it lives as long as the trie)."""
        if self._blocked is None or self._blocked.shape[0] != width:
            self._blocked = _mask(self.next_tokens(eos), width)
        return self._blocked

    def add(self, ids: list[int], free_after: bool = False) -> None:
        node = self
        for token in ids:
            node = node.children.setdefault(token, _Trie())
        node.free_after = node.free_after or free_after


class ActionConstraint:
    """The tokens allowed next, given the completion generated so far, for one turn's :class:`ActionSpace`."""

    def __init__(self, tokenizer: Any, space: ActionSpace) -> None:
        self.tokenizer = tokenizer
        self.eos: int = tokenizer.eos_token_id
        self.vocabulary = _vocabulary(tokenizer)
        self.pieces, self.plain, self.markup = self.vocabulary.pieces, self.vocabulary.plain, self.vocabulary.markup
        self.trie = _Trie()
        for ids in self.vocabulary.encode(tokenizer, [command + ACTION_CLOSE for command in space.commands]):
            self.trie.add(ids + [self.eos])
        if space.meta:
            for ids in self.vocabulary.encode(tokenizer, [f"{kind.value} [" for kind in META_ACTIONS]):
                self.trie.add(ids, free_after=True)

    def _ids(self, text: str) -> list[int]:
        return list(self.tokenizer.encode(text, add_special_tokens=False))

    def allowed(self, generated: list[int]) -> list[int]:
        """Allowed next tokens after ``generated`` (the completion so far, no prompt)."""
        text = self.tokenizer.decode(generated, skip_special_tokens=False)
        start = text.find(ACTION_OPEN)
        if start < 0:
            return self._thinking(text)
        action_start = self._token_index_after(generated, start + len(ACTION_OPEN))
        if action_start is None:  # "<action>" ended inside a token (cannot happen with byte-level BPE)
            return [self.eos]
        node = self.trie
        suffix = generated[action_start:]
        for position, token in enumerate(suffix):
            if node.free_after:
                return self._free_argument(suffix[position:])
            if token not in node.children:
                return [self.eos]
            node = node.children[token]
        if node.free_after:
            return self._free_argument([])
        return list(node.children) or [self.eos]

    def choices(self, completion: list[int]) -> list[bool]:
        """Per token of ``completion``: whether it was a choice (more than one token was allowed there). A
        forced token has probability 1 under the constrained policy, so it carries no policy gradient."""
        state, marks = self.start(), []
        for token in completion:
            marks.append(len(state.allowed()) > 1)
            state.advance(token)
        return marks

    def start(self) -> ConstraintState:
        """A walk through this constraint from an empty completion, a token at a time."""
        return ConstraintState(self)

    def _thinking(self, text: str) -> list[int]:
        """Before ``<action>``: tokens that keep ``text`` a prefix of ``<think>\n`` thought ``\n</think>…<action>``
        (an ungrammatical ``text`` can only end). Which tokens qualify depends only on where ``text`` stands
        (opening the thought; inside it, blank or not; past its newline), so those lists come from the
        vocabulary's cache; only a thought at its length limit is filtered here."""
        if not _grammatical(text):
            return [self.eos]
        thought = text[len(THINK_OPEN):]
        if len(text) < len(THINK_OPEN):  # opening the thought
            return self.vocabulary.grammatical_after(text) or [self.eos]
        if "\n" in thought:  # the thought has closed: on to <action>
            return self.vocabulary.grammatical_after(THINK_OPEN + "x" + thought[thought.index("\n"):]) or [self.eos]
        if len(thought) >= MAX_THOUGHT_CHARS:  # too long: it must close now
            return [t for t in self.markup if _grammatical(text + self.pieces[t])] or [self.eos]
        return self.vocabulary.grammatical_after(THINK_OPEN + ("x" if thought.strip() else ""))

    def _free_argument(self, argument: list[int]) -> list[int]:
        """A meta-action's argument: free text up to ``]</action>``, which is forced past MAX_ARGUMENT_CHARS."""
        text = self.tokenizer.decode(argument, skip_special_tokens=False)
        if text.endswith(ACTION_CLOSE):
            return [self.eos]
        if len(text) < MAX_ARGUMENT_CHARS:
            return self.vocabulary.argument_after(text)
        closing = self._ids("]" + ACTION_CLOSE)
        done = max(k for k in range(len(closing)) if k == 0 or argument[-k:] == closing[:k])
        return [closing[done]]

    def _token_index_after(self, generated: list[int], char_end: int) -> int | None:
        """The index of the first token after the one that completed ``<action>`` (searched from the end: the
        action part is short; token by token, since a partial UTF-8 byte decodes differently alone)."""
        for index in range(len(generated), 0, -1):
            if ACTION_OPEN not in self.tokenizer.decode(generated[:index - 1], skip_special_tokens=False):
                return index
        return None


class ConstraintState:
    """One completion's walk through an :class:`ActionConstraint`: :meth:`allowed` after each :meth:`advance`
    equals ``constraint.allowed(generated)`` for the tokens advanced so far, without decoding the whole completion
    at every token (the text grows by each token's piece; a piece that is part of a multi-byte character makes it
    decode the completion instead), and :meth:`blocked` gives the same as a mask, built once per cached list."""

    def __init__(self, constraint: ActionConstraint) -> None:
        self.constraint = constraint
        self.generated: list[int] = []
        self.text = ""
        self._partial = False  # a piece so far was part of a multi-byte character: decode instead of appending
        self._action_start: int | None = None  # index of the first token after "<action>"
        self._node: _Trie | None = constraint.trie  # None: off the trie (only the end-of-turn token remains)
        self._argument_start: int | None = None  # index of a meta-action's first argument token
        self._next: list[int] | None = None  # the tokens allowed next, once asked for (until the next advance)

    def advance(self, token: int) -> None:
        """Take ``token`` as the completion's next token."""
        c = self.constraint
        self.generated.append(token)
        self._next = None
        if self._action_start is None:
            piece = c.pieces[token] if token < len(c.pieces) else ""
            self._partial = self._partial or "\ufffd" in piece
            self.text = c.tokenizer.decode(self.generated, skip_special_tokens=False) if self._partial \
                else self.text + piece
            if ACTION_OPEN in self.text:
                self._action_start = len(self.generated)
            return
        if self._argument_start is not None or self._node is None:
            return
        if self._node.free_after:
            self._argument_start = len(self.generated) - 1
        else:
            self._node = self._node.children.get(token)

    def allowed(self) -> list[int]:
        """The tokens allowed next (the caller must not change the list)."""
        if self._next is None:
            self._next = self._allowed()
        return self._next

    def forced(self) -> int | None:
        """The next token when it is the only one allowed (a decoder may take it without asking the model)."""
        allowed = self.allowed()
        return allowed[0] if len(allowed) == 1 else None

    def blocked(self, width: int) -> Any:
        """The tokens not allowed next, as a boolean tensor of ``width`` (the model's vocabulary): a trie node's
        and the vocabulary's cached lists' masks are built once, other lists' each time."""
        c = self.constraint
        if self._action_start is not None and self._argument_start is None and self._node is not None \
                and not self._node.free_after:
            return self._node.blocked(c.eos, width)
        return c.vocabulary.blocked(self.allowed(), width)

    def _allowed(self) -> list[int]:
        c = self.constraint
        if self._action_start is None:
            return c._thinking(self.text)
        if self._argument_start is not None:
            return c._free_argument(self.generated[self._argument_start:])
        if self._node is None:
            return c.vocabulary.eos_only
        if self._node.free_after:
            return c._free_argument([])
        return self._node.next_tokens(c.eos)


def _grammatical(text: str) -> bool:
    """Whether ``text`` can still become ``<think>\n`` + one line of thought + ``\n</think>\n\n<action>`` (the
    action that follows is the trie's business)."""
    if len(text) <= len(THINK_OPEN):
        return THINK_OPEN.startswith(text)
    if not text.startswith(THINK_OPEN):
        return False
    rest = text[len(THINK_OPEN):]
    cut = rest.find("\n")
    if cut < 0:
        return "<" not in rest
    thought, tail = rest[:cut], rest[cut:]
    if "<" in thought or not thought.strip():
        return False
    return THINK_TO_ACTION.startswith(tail)  # a token may end at "<action>" but never run past it


def _argument_ok(text: str) -> bool:
    """Whether a meta-action's argument so far can still end as one line closed by ``]</action>``."""
    cut = text.find("<")
    if cut < 0:
        return "\n" not in text
    head, tail = text[:cut], text[cut:]
    return "\n" not in head and head.endswith("]") and ACTION_CLOSE.startswith(tail)


@dataclass
class _Vocabulary:
    """One tokenizer's tokens as the grammar sees them: each token's text, the plain tokens (no tag, no newline)
    and the markup tokens."""

    pieces: list[str]
    plain: list[int]
    markup: list[int]
    eos_only: list[int]
    _grammatical_after: dict[str, list[int]] = field(default_factory=dict)
    _argument_after: dict[str, list[int]] = field(default_factory=dict)
    _lasting: set[int] = field(default_factory=set)  # ids of the cached lists above
    _masks: dict[tuple[int, int], tuple[list[int], Any]] = field(default_factory=dict)
    _encoded: dict[str, list[int]] = field(default_factory=dict)

    def encode(self, tokenizer: Any, texts: list[str]) -> list[list[int]]:
        """The token ids of each text alone (no special tokens), encoded in one call and kept: a game's commands
        recur turn after turn."""
        missing = [t for t in dict.fromkeys(texts) if t not in self._encoded]
        if missing:
            if len(self._encoded) > ENCODED_CACHE:
                self._encoded.clear()
            batch = tokenizer(missing, add_special_tokens=False)["input_ids"]
            self._encoded.update(zip(missing, (list(ids) for ids in batch), strict=True))
        return [self._encoded[t] for t in texts]

    def blocked(self, tokens: list[int], width: int) -> Any:
        """A boolean tensor of ``width``, True where a token is not in ``tokens``: cached by identity for this
        vocabulary's own cached lists (which live as long as it does), built afresh for any other list."""
        if id(tokens) not in self._lasting:
            return _mask(tokens, width)
        key = (id(tokens), width)
        if key not in self._masks:
            self._masks[key] = (tokens, _mask(tokens, width))
        return self._masks[key][1]

    def argument_after(self, text: str) -> list[int]:
        """The tokens that keep a meta-action's argument ``text`` + token well-formed (:func:`_argument_ok`). Until
        the argument holds a tag or a newline, which tokens qualify depends only on whether it ends with ``]``, so
        those two lists are built once (callers must not change them); other texts are filtered each time."""
        if "<" in text or "\n" in text:
            return [t for t in self.plain + self.markup if _argument_ok(text + self.pieces[t])]
        representative = "x]" if text.endswith("]") else "x"
        if representative not in self._argument_after:
            tokens = [t for t in self.plain + self.markup if _argument_ok(representative + self.pieces[t])]
            self._argument_after[representative] = tokens
            self._lasting.add(id(tokens))
        return self._argument_after[representative]

    def grammatical_after(self, text: str) -> list[int]:
        """The tokens that keep ``text`` + token grammatical (:func:`_grammatical`), built once per ``text``:
        callers pass a few representative texts (see ``ActionConstraint._thinking``) and must not change the
        list."""
        if text not in self._grammatical_after:
            tokens = [t for t in self.markup + self.plain if _grammatical(text + self.pieces[t])]
            self._grammatical_after[text] = tokens
            self._lasting.add(id(tokens))
        return self._grammatical_after[text]


def _mask(tokens: list[int], width: int) -> Any:
    """A boolean tensor of ``width``, True where a token is not in ``tokens``."""
    import torch

    mask = torch.ones(width, dtype=torch.bool)
    mask[torch.tensor(tokens, dtype=torch.long)] = False
    return mask


_VOCABULARIES: dict[int, _Vocabulary] = {}


def _vocabulary(tokenizer: Any) -> _Vocabulary:
    """Per tokenizer, once: its :class:`_Vocabulary`."""
    key = id(tokenizer)
    if key not in _VOCABULARIES:
        eos = tokenizer.eos_token_id
        pieces = [tokenizer.decode([t], skip_special_tokens=False) for t in range(len(tokenizer))]
        plain = [t for t, text in enumerate(pieces) if text and "<" not in text and "\n" not in text and t != eos]
        markup = [t for t, text in enumerate(pieces) if text and ("<" in text or "\n" in text)]
        vocabulary = _Vocabulary(pieces, plain, markup, [eos])
        vocabulary._lasting.add(id(vocabulary.eos_only))
        _VOCABULARIES[key] = vocabulary
    return _VOCABULARIES[key]
