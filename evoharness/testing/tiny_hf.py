"""A tiny randomly initialised Qwen3 with a tokenizer trained on a few game-like lines (no downloads).

For tests of anything that runs a Hugging Face model: saves in milliseconds, loads offline.
"""

from __future__ import annotations

from pathlib import Path

from evoharness.training.tiny_student import TinyStudentSpec, build_tiny_student

CORPUS = [
    "<think>I go to the countertop to find the apple.</think><action>go to countertop 1</action>",
    "<think>I take it.</think><action>take apple 1 from countertop 1</action>",
    "recall [where to find apple] commit [find the apple] track [apple] note [apples are on countertops]",
    "You are in the middle of a room. Looking quickly around you, you see a cabinet 1, a fridge 1.",
    "Task: put a clean mug in coffeemachine. Admissible commands: look, inventory, go to sinkbasin 1",
]


def build_tiny_qwen3(folder: str | Path, vocab_size: int = 512, seed: int = 0) -> Path:
    """Write a tiny Qwen3 (hidden 64, 2 layers, 2,048 positions) and its tokenizer to ``folder``."""
    spec = TinyStudentSpec(vocab_size=vocab_size, max_position_embeddings=2048, seed=seed)
    return build_tiny_student(folder, CORPUS * 4, spec)
