"""Constrained decoding's cost per generated token: the cached thought lists against filtering the vocabulary.

    python benchmarks/constraint_speed.py --db WAREHOUSE --model-version VERSION   # 256 of its stored turns

Every token a local student generates asks :meth:`ActionConstraint.allowed` what may come next (and GRPO asks
again for every completion token, in ``choices``). The old path filtered, at each token before ``<action>``, the
markup tokens (and, once the thought had closed, the whole vocabulary) through the grammar; the library builds
those lists once per tokenizer. This replays the version's stored completions token by token through both, on its
own tokenizer, checks that they allow the same tokens at every step, and prints seconds and the ratio. Writes
benchmarks/results/constraint_speed.json.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from report import RESULTS, write_report

from evoharness.harness.grammar import ActionKind, parse_turn
from evoharness.teachers.clients.constrained import (
    MAX_THOUGHT_CHARS,
    THINK_OPEN,
    ActionConstraint,
    ActionSpace,
    _grammatical,
)
from warehouse import Warehouse

OUTPUT = RESULTS / "constraint_speed.json"


class FilteringConstraint(ActionConstraint):
    """The path before the cache: the thought's allowed tokens filtered through the grammar at every token."""

    def _thinking(self, text: str) -> list[int]:
        thought = text[len(THINK_OPEN):]
        if len(text) < len(THINK_OPEN) or "\n" in thought or len(thought) >= MAX_THOUGHT_CHARS:
            closing = self.markup if "\n" not in thought and len(thought) >= MAX_THOUGHT_CHARS else \
                self.markup + self.plain
            return [t for t in closing if _grammatical(text + self.pieces[t])] or [self.eos]
        return self.plain + [t for t in self.markup if _grammatical(text + self.pieces[t])]


def stored_turns(db: Path, model_version: str, turns: int) -> tuple[str, list[str]]:
    """The version's model folder and its first ``turns`` stored completions that parse (in a fixed order)."""
    with Warehouse(db, read_only=True) as warehouse:
        row = warehouse.con.execute("SELECT path FROM model_versions WHERE model_version = ?",
                                    [model_version]).fetchone()
        if row is None:
            raise SystemExit(f"unknown model version {model_version!r} in {db}")
        outputs = warehouse.con.execute(
            "SELECT s.raw_output FROM steps s JOIN episodes e USING (episode_id) WHERE e.model_version = ? "
            "AND s.parse_error IS NULL ORDER BY e.episode_id, s.t LIMIT ?", [model_version, turns]).fetchall()
    return row[0], [o[0] for o in outputs]


def replay(constraint_type: type[ActionConstraint], tokenizer, completions: list[str]) -> tuple[float, list]:
    """Seconds to ask for every completion token's allowed set, and the sets (sorted, for the comparison)."""
    allowed: list[list[int]] = []
    seconds = 0.0
    for text in completions:
        turn = parse_turn(text)
        commands = (turn.action,) if turn.kind is ActionKind.ENV else ()
        ids = tokenizer.encode(text, add_special_tokens=False) + [tokenizer.eos_token_id]
        constraint = constraint_type(tokenizer, ActionSpace(commands))
        started = time.perf_counter()
        sets = [constraint.allowed(ids[:i]) for i in range(len(ids))]
        seconds += time.perf_counter() - started
        allowed.extend(sorted(s) for s in sets)
    return seconds, allowed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db", type=Path, required=True, help="A warehouse holding the version's evaluation.")
    parser.add_argument("--model-version", required=True)
    parser.add_argument("--turns", type=int, default=256)
    parser.add_argument("--output", type=Path, default=OUTPUT)
    args = parser.parse_args()
    from transformers import AutoTokenizer

    path, completions = stored_turns(args.db, args.model_version, args.turns)
    tokenizer = AutoTokenizer.from_pretrained(path, local_files_only=True)
    ActionConstraint(tokenizer, ActionSpace(())).allowed([])  # builds the per-tokenizer vocabulary for both
    tokens = sum(len(tokenizer.encode(c, add_special_tokens=False)) + 1 for c in completions)
    filtering_seconds, filtering_sets = replay(FilteringConstraint, tokenizer, completions)
    cached_seconds, cached_sets = replay(ActionConstraint, tokenizer, completions)
    if cached_sets != filtering_sets:
        raise SystemExit("the cached constraint allows other tokens than the filtering one")
    result = {
        "benchmark": "constraint_speed",
        "command": f"python benchmarks/constraint_speed.py --db DB --model-version {args.model_version} "
                   f"--turns {args.turns}",
        "model_version": args.model_version, "turns": len(completions), "tokens": tokens,
        "filtering_seconds": round(filtering_seconds, 3), "cached_seconds": round(cached_seconds, 3),
        "filtering_us_per_token": round(filtering_seconds / tokens * 1e6, 1),
        "cached_us_per_token": round(cached_seconds / tokens * 1e6, 1),
        "speedup": round(filtering_seconds / cached_seconds, 1), "same_allowed_tokens": True,
    }
    print(f"{len(completions)} turns, {tokens} tokens: filtering {filtering_seconds:.2f} s, cached "
          f"{cached_seconds:.2f} s ({result['speedup']}x), the same allowed tokens at every step")
    write_report(args.output, result)


if __name__ == "__main__":
    main()
