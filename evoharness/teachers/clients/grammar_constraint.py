"""A request's grammar as a decoding constraint, with xgrammar (the engine vLLM and SGLang compile structured
outputs with): what :mod:`evoharness.engine_server` holds a served completion to when a request carries one.

:class:`GrammarConstraint` walks like an :class:`~.constrained.ActionConstraint` (``start`` → ``advance`` /
``blocked``; ``allowed`` for the padded ``generate`` path), so both decoding engines take either. The end-of-turn
token is the grammar's only stop token: a completion ends when the grammar is complete, as the local trie ends it.
"""

from __future__ import annotations

import threading
from typing import Any

import torch

BITS = torch.arange(32, dtype=torch.int32)
GRAMMAR_CACHE_BYTES = 128 * 2**20
"""The compiled grammars a server keeps. Nearly every turn's command list is new and each compiled turn grammar
is large, so an unbounded cache grows a served teacher's memory without limit (measured in the lab notebook's
walk-through behind the engine server, docs/notebook/)."""


class GrammarError(ValueError):
    """A request's grammar does not compile; the message is xgrammar's, on one line."""


class GrammarCompilers:
    """One xgrammar compiler per tokenizer, on one thread (more do not compile a turn grammar faster on 2 cores), its
    cache bounded by :data:`GRAMMAR_CACHE_BYTES` (a group of episodes of one game repeats its first turns)."""

    def __init__(self, tokenizer: Any, vocab_size: int) -> None:
        import xgrammar as xgr

        self.eos: int = tokenizer.eos_token_id
        self.vocab_size = vocab_size
        info = xgr.TokenizerInfo.from_huggingface(tokenizer, vocab_size=vocab_size, stop_token_ids=[self.eos])
        self._compiler = xgr.GrammarCompiler(info, max_threads=1, cache_limit_bytes=GRAMMAR_CACHE_BYTES)
        self._lock = threading.Lock()

    def constraint(self, ebnf: str) -> GrammarConstraint:
        """The constraint of ``ebnf`` (xgrammar's EBNF dialect, rooted at ``root``); :class:`GrammarError` when it
        does not compile."""
        try:
            with self._lock:
                compiled = self._compiler.compile_grammar(ebnf)
        except (RuntimeError, ValueError) as exc:
            raise GrammarError(f"the grammar does not compile: {' '.join(str(exc).split())}") from None
        return GrammarConstraint(compiled, self.eos, self.vocab_size)


class GrammarConstraint:
    """The tokens a compiled grammar allows next; the end-of-turn token once the grammar is complete."""

    def __init__(self, compiled: Any, eos: int, vocab_size: int) -> None:
        self.compiled, self.eos, self.vocab_size = compiled, eos, vocab_size

    def start(self) -> GrammarWalk:
        """A walk through the grammar from an empty completion, a token at a time."""
        return GrammarWalk(self)

    def allowed(self, generated: list[int]) -> list[int]:
        """Allowed next tokens after ``generated`` (the completion so far, no prompt)."""
        walk = self.start()
        for token in generated:
            walk.advance(token)
        return walk.allowed()


class GrammarWalk:
    """One completion's walk: xgrammar's matcher, advanced by every token the decoder picked."""

    def __init__(self, constraint: GrammarConstraint) -> None:
        import xgrammar as xgr

        self.constraint = constraint
        self._matcher = xgr.GrammarMatcher(constraint.compiled, override_stop_tokens=[constraint.eos])
        self._bitmask = xgr.allocate_token_bitmask(1, constraint.vocab_size)
        self._ended = False
        self._mask: torch.Tensor | None = None  # the tokens allowed next, once asked for (until the next advance)

    def advance(self, token: int) -> None:
        """Take ``token`` as the completion's next token (past the end, nothing more is checked)."""
        self._mask = None
        if self._ended:
            return
        if not self._matcher.accept_token(token):
            raise GrammarError(f"token {token} is outside the grammar (the decoder ignored its mask)")
        self._ended = self._matcher.is_terminated()

    def _allowed_mask(self) -> torch.Tensor:
        if self._mask is None:
            if self._ended:
                self._mask = torch.zeros(self.constraint.vocab_size, dtype=torch.bool)
                self._mask[self.constraint.eos] = True
            else:
                self._matcher.fill_next_token_bitmask(self._bitmask)
                bits = (self._bitmask[0].unsqueeze(1) >> BITS) & 1
                self._mask = bits.flatten()[:self.constraint.vocab_size].bool()
        return self._mask

    def forced(self) -> int | None:
        """The next token when it is the only one the grammar allows (a decoder may take it without the model)."""
        allowed = torch.nonzero(self._allowed_mask()).view(-1)
        return int(allowed[0]) if len(allowed) == 1 else None

    def blocked(self, width: int) -> torch.Tensor:
        """The tokens not allowed next, as a boolean tensor of ``width`` (the logits' width; past the grammar's
        vocabulary every token is blocked)."""
        blocked = torch.ones(width, dtype=torch.bool)
        allowed = self._allowed_mask()[:width]
        blocked[:len(allowed)] = ~allowed
        return blocked

    def allowed(self) -> list[int]:
        """The tokens allowed next."""
        return torch.nonzero(self._allowed_mask()).view(-1).tolist()
