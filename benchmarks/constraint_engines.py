"""The hand-written action constraint (trie + cached masks) against xgrammar, per turn, on the student's tokenizer.

    python benchmarks/constraint_engines.py --model MODEL_DIR [--turns 200]

Each turn builds the constraint for a fresh action space (30 commands, as a turn of a household game offers) and
walks one completion through it, taking the mask of allowed tokens before every token: what decoding asks of it.
xgrammar compiles the same turn grammar as EBNF (evoharness.teachers.clients.structured, what a served model gets),
fills its token bitmask and accepts each token. Prints and writes microseconds per turn and per token to
``benchmarks/results/constraint_engines.json``. xgrammar is measured only where it is installed.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import time
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")

from evoharness.teachers.clients.constrained import ActionConstraint, ActionSpace
from evoharness.teachers.clients.structured import turn_grammar

RESULTS = Path(__file__).resolve().parent / "results" / "constraint_engines.json"
PLACES = ["cabinet", "countertop", "drawer", "shelf", "fridge", "microwave", "sinkbasin", "stoveburner"]


def action_space(turn: int) -> ActionSpace:
    """30 commands of the shapes a game offers, varied per turn."""
    commands = [f"go to {PLACES[(turn + i) % len(PLACES)]} {1 + (turn + i) % 9}" for i in range(24)]
    commands += [f"take apple {1 + turn % 3} from countertop {1 + i}" for i in range(4)] + ["look", "inventory"]
    return ActionSpace(tuple(dict.fromkeys(commands)), meta=True)


def completion(space: ActionSpace, turn: int) -> str:
    return (f"<think>\nI look for the apple on the {PLACES[turn % len(PLACES)]} next, it may be there.\n</think>\n\n"
            f"<action>{space.commands[turn % len(space.commands)]}</action>")


def trie_turns(tokenizer, turns: int, width: int) -> tuple[float, int]:
    tokens = 0
    started = time.perf_counter()
    for turn in range(turns):
        space = action_space(turn)
        ids = tokenizer.encode(completion(space, turn), add_special_tokens=False) + [tokenizer.eos_token_id]
        state = ActionConstraint(tokenizer, space).start()
        for token in ids:
            mask = state.blocked(width)
            assert not mask[token], "the completion must be allowed"
            state.advance(token)
            tokens += 1
    return time.perf_counter() - started, tokens


def xgrammar_turns(tokenizer, turns: int, width: int) -> tuple[float, int]:
    import xgrammar as xgr

    info = xgr.TokenizerInfo.from_huggingface(tokenizer, vocab_size=width, stop_token_ids=[tokenizer.eos_token_id])
    compiler = xgr.GrammarCompiler(info, max_threads=1, cache_enabled=False)
    bitmask = xgr.allocate_token_bitmask(1, width)
    tokens = 0
    started = time.perf_counter()
    for turn in range(turns):
        space = action_space(turn)
        ids = tokenizer.encode(completion(space, turn), add_special_tokens=False) + [tokenizer.eos_token_id]
        matcher = xgr.GrammarMatcher(compiler.compile_grammar(turn_grammar(space)))
        for token in ids:
            matcher.fill_next_token_bitmask(bitmask)
            assert matcher.accept_token(token), "the completion must be allowed"
            tokens += 1
    return time.perf_counter() - started, tokens


def main() -> None:
    from transformers import AutoConfig, AutoTokenizer

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", required=True)
    parser.add_argument("--turns", type=int, default=200)
    parser.add_argument("--output", type=Path, default=RESULTS)
    args = parser.parse_args()
    tokenizer = AutoTokenizer.from_pretrained(args.model)
    width = AutoConfig.from_pretrained(args.model).vocab_size
    trie_turns(tokenizer, 5, width)  # warm the vocabulary's caches
    seconds, tokens = trie_turns(tokenizer, args.turns, width)
    report: dict[str, object] = {"turns": args.turns, "tokens": tokens, "trie_us_per_turn": round(seconds / args.turns * 1e6),
                                 "trie_us_per_token": round(seconds / tokens * 1e6, 1)}
    try:
        xgrammar_turns(tokenizer, 5, width)
        seconds, tokens = xgrammar_turns(tokenizer, args.turns, width)
        report |= {"xgrammar_us_per_turn": round(seconds / args.turns * 1e6),
                   "xgrammar_us_per_token": round(seconds / tokens * 1e6, 1)}
    except ImportError as exc:
        report["xgrammar"] = f"not installed ({exc})"
    report |= {"command": "python benchmarks/constraint_engines.py --model MODEL --turns N",
               "note": "2 CPU cores shared by six agents at once; both engines measured in one run",
               "machine": {"cpus": os.cpu_count(), "python": platform.python_version()}}
    print(json.dumps(report, indent=1))
    args.output.write_text(json.dumps(report, indent=2) + "\n")


if __name__ == "__main__":
    main()
