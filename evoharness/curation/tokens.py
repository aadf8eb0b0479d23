"""Token counts for length limits: a Hugging Face tokenizer when given, else a documented estimate."""

from __future__ import annotations

import math
from collections.abc import Callable


def token_counter(tokenizer_path: str | None) -> Callable[[str], int]:
    """Count tokens with ``tokenizer_path``'s tokenizer, or estimate as UTF-8 bytes / 4 (rounded up)."""
    if tokenizer_path is None:
        return lambda text: math.ceil(len(text.encode()) / 4)
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(tokenizer_path)
    return lambda text: len(tokenizer(text, add_special_tokens=False)["input_ids"])
