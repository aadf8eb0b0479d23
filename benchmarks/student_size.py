"""Students of several sizes side by side on this machine: what a larger student (issue #27's lever, "10–30M where
the recipe still fits the time target") costs in each stage, by the kernel-level rates of ``roofline.py``.

    OMP_NUM_THREADS=1 python benchmarks/student_size.py [--sizes 256x4 384x6 512x8]
                                                        # writes benchmarks/results/student_size.json

A size ``HxL`` is a Qwen3 student of hidden size H and L layers, shaped as the ``small`` preset is (``256x4``):
MLP 3H, heads of 64 dimensions (H/64 of them; 2 key/value heads, 1 where H/64 is odd), the 1,024-token vocabulary, tied embeddings.
For each size and precision (fp32, and bf16 where the CPU has bf16 units), on one thread (each of the recipe's two
training processes has one core): the stages of ``roofline.stage_rates`` (SFT step, prefill, decode of 16 and 64
rows, GRPO scoring) as useful FLOP/s and as tokens/s, and ``slower_than_first``: how many times longer the same
tokens take than on the first size. A stage's wall time in the recipe scales by about that factor (the SFT and
GRPO steps are the stage's own kernels; evaluation adds the environment, which does not grow with the student).
The sizes run one after another in one process, so their ratios share the machine's state.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any

os.environ.setdefault("OMP_NUM_THREADS", "1")

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from report import command_line, write_report
from roofline import PROMPT_TOKENS, forward_flops_per_token, matmul_params, stage_rates, student_shapes

from evoharness.training.hardware import bf16_units
from evoharness.training.tiny_student import TinyStudentSpec

RESULTS = Path(__file__).resolve().parent / "results" / "student_size.json"
CONTEXT = {"sft": PROMPT_TOKENS / 2, "sft_autocast": PROMPT_TOKENS / 2, "prefill": PROMPT_TOKENS / 2, "decode_16": 320, "decode_64": 320,
           "grpo_scoring": (PROMPT_TOKENS + 24) / 2}
"""The mean attention context of each stage's tokens in ``roofline.stage_rates`` (to turn FLOP/s into tokens/s)."""
TRAINED = {"sft": 3, "sft_autocast": 3, "grpo_scoring": 3}
"""Forward passes' worth of FLOPs per token of a training stage (forward and backward)."""


def student_spec(size: str) -> TinyStudentSpec:
    """``HxL`` as a student spec shaped like the ``small`` preset (``256x4``)."""
    try:
        hidden, layers = (int(part) for part in size.lower().split("x"))
    except ValueError:
        raise SystemExit(f"size {size!r}: expected HIDDENxLAYERS, e.g. 384x6") from None
    if hidden % 64 or hidden <= 0 or layers <= 0:
        raise SystemExit(f"size {size!r}: the hidden size must be a positive multiple of 64 (heads of 64 dimensions), the layers positive")
    heads = hidden // 64
    return TinyStudentSpec(vocab_size=1024, hidden_size=hidden, intermediate_size=3 * hidden, num_hidden_layers=layers,
                           num_attention_heads=heads, num_key_value_heads=2 if heads % 2 == 0 else 1, head_dim=64,
                           max_position_embeddings=2048)


def parameters(shapes: dict[str, int]) -> int:
    """Weights of the student: its matmuls, the tied embedding, and the norms."""
    layers, head = matmul_params(shapes)
    norms = shapes["layers"] * (2 * shapes["hidden"] + 2 * shapes["head_dim"]) + shapes["hidden"]
    return layers + head + norms


def measure(size: str, precisions: list[tuple[str, torch.dtype]]) -> dict[str, Any]:
    shapes = student_shapes(student_spec(size))
    found: dict[str, Any] = {"parameters": parameters(shapes), "stages": {}}
    for name, dtype in precisions:
        rates = stage_rates(dtype, shapes)
        found["stages"][name] = {
            stage: {"gflops": round(rate / 1e9, 2),
                    "tokens_per_second": round(rate / (TRAINED.get(stage, 1) * forward_flops_per_token(
                        shapes, CONTEXT[stage], logits=stage != "prefill")), 1)}
            for stage, rate in rates.items()}
        print(size, name, found["stages"][name], flush=True)
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", nargs="+", default=["256x4", "384x6", "512x8"],
                        help="HIDDENxLAYERS, the first the baseline (256x4 is the small preset)")
    parser.add_argument("--output", type=Path, default=RESULTS)
    args = parser.parse_args()
    torch.set_num_threads(1)
    precisions = [("fp32", torch.float32), *([("bf16", torch.bfloat16)] if bf16_units() else [])]
    sizes = {size: measure(size, precisions) for size in args.sizes}
    first = sizes[args.sizes[0]]["stages"]
    for found in sizes.values():
        found["slower_than_first"] = {
            name: {stage: round(first[name][stage]["tokens_per_second"] / rate["tokens_per_second"], 2)
                   for stage, rate in stages.items()}
            for name, stages in found["stages"].items()}
    write_report(args.output, {"benchmark": "student_size",
                               "command": f"OMP_NUM_THREADS={os.environ['OMP_NUM_THREADS']} {command_line()}",
                               "threads": 1, "sizes": sizes})
    print(f"wrote {args.output}")


if __name__ == "__main__":
    main()
