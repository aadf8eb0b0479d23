"""A tiny randomly initialised Qwen3 model with a locally trained byte-level BPE tokenizer (no downloads).

For tests of anything that runs a Hugging Face model: saves in milliseconds, loads offline.
"""

from __future__ import annotations

from pathlib import Path

CHAT_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
CORPUS = [
    "<think>I go to the countertop to find the apple.</think><action>go to countertop 1</action>",
    "<think>I take it.</think><action>take apple 1 from countertop 1</action>",
    "recall [where to find apple] commit [find the apple] track [apple] note [apples are on countertops]",
    "You are in the middle of a room. Looking quickly around you, you see a cabinet 1, a fridge 1.",
    "Task: put a clean mug in coffeemachine. Admissible commands: look, inventory, go to sinkbasin 1",
]


def build_tiny_qwen3(folder: str | Path, vocab_size: int = 512, seed: int = 0) -> Path:
    """Write a tiny Qwen3 (hidden 64, 2 layers) and its tokenizer to ``folder``; returns the folder."""
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast, Qwen3Config, Qwen3ForCausalLM

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    core = Tokenizer(models.BPE())
    core.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    core.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=SPECIAL_TOKENS,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    core.train_from_iterator(CORPUS * 4, trainer=trainer)
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=core, eos_token="<|im_end|>", pad_token="<|endoftext|>",
                                        bos_token=None, unk_token=None)
    tokenizer.chat_template = CHAT_TEMPLATE
    tokenizer.save_pretrained(folder)
    torch.manual_seed(seed)
    config = Qwen3Config(
        vocab_size=len(tokenizer), hidden_size=64, intermediate_size=128, num_hidden_layers=2,
        num_attention_heads=2, num_key_value_heads=1, head_dim=32, max_position_embeddings=2048,
        tie_word_embeddings=True, eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id,
        bos_token_id=None,
    )
    Qwen3ForCausalLM(config).save_pretrained(folder)
    return folder
