"""This machine's matmul roofline at the ``small`` student's shapes, and each student stage as a fraction of it.

    OMP_NUM_THREADS=1 python benchmarks/roofline.py            # writes benchmarks/results/roofline.json

The roofline is the sustained ``torch`` matmul throughput over the student's own projections (hidden 256, key/value
128, MLP 768, LM head 1,024) at a decode batch (16 and 64 rows) and at a prefill / training batch (4,096 rows), in
fp32 and bf16, on 1 and 2 threads. The stages run the randomly initialised ``small`` architecture (speed, not skill),
in fp32, and in bf16 too where the CPU has bf16 units (where it emulates bf16 the recipes train in fp32):

* ``sft``: forward, backward and AdamW step on a batch of 14 examples of 290 tokens (3 forward passes of FLOPs);
* ``prefill``: one forward pass over packed prompts of 290 tokens (the student rendering's mean turn);
* ``decode``: one incremental step of 16 and of 64 rows against a 320-token KV cache;
* ``grpo_scoring``: the training pass of GRPO over a turn's prompt and completion (forward and backward).

Each stage's FLOP/s counts only useful work (:func:`forward_flops_per_token`: matmuls, attention over the causal
context, the LM head where logits are needed) and is divided by the roofline of its precision, thread count and
shape class. :mod:`benchmarks.student_speed` uses the same counts for the end-to-end stages.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

os.environ.setdefault("OMP_NUM_THREADS", "1")

import torch

from evoharness.training.hardware import bf16_units

sys.path.insert(0, str(Path(__file__).resolve().parent))
from report import command_line, write_report

RESULTS = Path(__file__).resolve().parent / "results" / "roofline.json"
PROMPT_TOKENS = 290
"""The student rendering's mean prompt length (``SMALL``'s docstring in ``training/tiny_student.py``)."""


def student_shapes(spec: Any = None) -> dict[str, int]:
    """A student's dimensions: ``spec`` (a ``TinyStudentSpec``), by default the ``small`` preset's."""
    from evoharness.training.tiny_student import SMALL, STUDENT_PRESETS

    spec = spec or STUDENT_PRESETS[SMALL]
    return {"hidden": spec.hidden_size, "intermediate": spec.intermediate_size, "layers": spec.num_hidden_layers,
            "heads": spec.num_attention_heads, "kv_heads": spec.num_key_value_heads, "head_dim": spec.head_dim,
            "vocab": spec.vocab_size}


def matmul_params(shapes: dict[str, int]) -> tuple[int, int]:
    """(weights multiplied per token in the decoder layers, weights of the LM head)."""
    h, q, kv = shapes["hidden"], shapes["heads"] * shapes["head_dim"], shapes["kv_heads"] * shapes["head_dim"]
    per_layer = h * q + 2 * h * kv + q * h + 3 * h * shapes["intermediate"]
    return shapes["layers"] * per_layer, h * shapes["vocab"]


def forward_flops_per_token(shapes: dict[str, int], context: float, logits: bool = True) -> float:
    """Useful FLOPs of one token's forward pass: 2 per weight of every matmul, the LM head when its logits are
    needed, and attention (scores and weighted sum) over ``context`` earlier tokens in every layer."""
    layers, head = matmul_params(shapes)
    attention = 4 * shapes["layers"] * shapes["heads"] * shapes["head_dim"] * context
    return 2 * layers + (2 * head if logits else 0) + attention


def _rate(work: Callable[[], Any], flops: float, seconds: float = 1.5) -> float:
    """FLOP/s of ``work`` (``flops`` per call), best of three timed windows after a warm-up (one timed call when a
    call outlasts a window: emulated bf16)."""
    started = time.perf_counter()
    work()
    if (first := time.perf_counter() - started) > seconds / 3:
        started = time.perf_counter()
        work()
        return flops / min(first, time.perf_counter() - started)
    best = 0.0
    for _ in range(3):
        calls, started = 0, time.perf_counter()
        while (elapsed := time.perf_counter() - started) < seconds / 3:
            work()
            calls += 1
        best = max(best, calls * flops / elapsed)
    return best


def matmul_roofline(shapes: dict[str, int], rows: int, dtype: torch.dtype) -> float:
    """Sustained FLOP/s of the student's projections on ``rows`` tokens (the roofline of that shape class)."""
    h, f, v = shapes["hidden"], shapes["intermediate"], shapes["vocab"]
    q, kv = shapes["heads"] * shapes["head_dim"], shapes["kv_heads"] * shapes["head_dim"]
    pairs = [(h, q), (h, kv), (h, kv), (q, h), (h, f), (h, f), (f, h), (h, v)]
    inputs = {k: torch.randn(rows, k, dtype=dtype) for k in {h, f, q}}
    weights = [torch.randn(k, n, dtype=dtype) for k, n in pairs]
    flops = sum(2.0 * rows * k * n for k, n in pairs)

    def work() -> None:
        for (k, _), w in zip(pairs, weights, strict=True):
            torch.mm(inputs[k], w)

    return _rate(work, flops)


def small_model(dtype: torch.dtype = torch.float32, shapes: dict[str, int] | None = None,
                passes: torch.dtype | None = None) -> Any:
    """The randomly initialised ``small`` architecture in ``dtype``, or one of ``shapes`` (no tokenizer needed: speed
    only), with the attention kernel that training passes in ``passes`` (None: ``dtype``) use
    (:func:`training_attention`)."""
    from transformers import Qwen3Config, Qwen3ForCausalLM

    from evoharness.training.hardware import training_attention

    s = shapes or student_shapes()
    torch.manual_seed(0)
    config = Qwen3Config(vocab_size=s["vocab"], hidden_size=s["hidden"], intermediate_size=s["intermediate"],
                         num_hidden_layers=s["layers"], num_attention_heads=s["heads"],
                         num_key_value_heads=s["kv_heads"], head_dim=s["head_dim"], max_position_embeddings=2048,
                         tie_word_embeddings=True,
                         attn_implementation=training_attention("auto", bf16=(passes or dtype) == torch.bfloat16))
    model: Any = Qwen3ForCausalLM(config)
    return model.to(dtype)


def stage_rates(dtype: torch.dtype, shapes: dict[str, int] | None = None) -> dict[str, float]:
    """Useful FLOP/s of each stage's kernel-level work on the ``small`` architecture (or one of ``shapes``)."""
    from evoharness.teachers.clients.fast_decode import DecodeState, Qwen3Runner

    shapes = shapes or student_shapes()
    model = small_model(dtype, shapes)
    rates: dict[str, float] = {}
    examples = 4096 // PROMPT_TOKENS
    ids = torch.randint(0, shapes["vocab"], (examples, PROMPT_TOKENS))
    train_flops = 3 * examples * PROMPT_TOKENS * forward_flops_per_token(shapes, PROMPT_TOKENS / 2)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)

    def sft_step() -> None:  # a batch of equal-length examples, as the recipe's length-grouped batches nearly are
        model.train()
        out = model(input_ids=ids, labels=ids)
        out.loss.backward()
        optimizer.step()
        optimizer.zero_grad()

    rates["sft"] = _rate(sft_step, train_flops, seconds=6)
    if dtype == torch.bfloat16:  # the trainers' mixed precision: fp32 weights, gradients and AdamW, bf16 autocast
        mixed = small_model(torch.float32, shapes, passes=torch.bfloat16)
        mixed_optimizer = torch.optim.AdamW(mixed.parameters(), lr=1e-4)

        def sft_autocast_step() -> None:
            mixed.train()
            with torch.autocast("cpu", dtype=torch.bfloat16):
                out = mixed(input_ids=ids, labels=ids)
            out.loss.backward()
            mixed_optimizer.step()
            mixed_optimizer.zero_grad()

        rates["sft_autocast"] = _rate(sft_autocast_step, train_flops, seconds=6)
    model.eval()
    runner = Qwen3Runner(model)
    prompts = [list(map(int, torch.randint(0, shapes["vocab"], (PROMPT_TOKENS,)))) for _ in range(16)]
    prefill_flops = 16 * PROMPT_TOKENS * forward_flops_per_token(shapes, PROMPT_TOKENS / 2, logits=False)

    def prefill() -> None:
        with torch.no_grad():
            runner.prefill(DecodeState.empty(runner, 16, 2 * PROMPT_TOKENS), list(range(16)), prompts)

    rates["prefill"] = _rate(prefill, prefill_flops, seconds=4)
    for rows in (16, 64):
        state = DecodeState.empty(runner, rows, 2 * PROMPT_TOKENS)
        with torch.no_grad():
            runner.prefill(state, list(range(rows)), [p[:320 // 2] + p[:320 // 2] for p in prompts * (rows // 16)])
        tokens = torch.randint(0, shapes["vocab"], (rows,))

        def step(state: DecodeState = state, tokens: torch.Tensor = tokens, rows: int = rows) -> None:
            with torch.no_grad():
                runner.decode(state, rows, tokens)
            state.lengths[:rows] -= 1  # keep the context at 320 tokens

        rates[f"decode_{rows}"] = _rate(step, rows * forward_flops_per_token(shapes, 320))
    model.train()
    turn = PROMPT_TOKENS + 24  # a turn's prompt and a trained student's completion
    batch = 8
    grpo_ids = torch.randint(0, shapes["vocab"], (batch, turn))

    def grpo_score() -> None:
        logits = model(input_ids=grpo_ids).logits
        logits.log_softmax(-1)[:, -24:].sum().backward()
        model.zero_grad()

    rates["grpo_scoring"] = _rate(grpo_score, 3 * batch * turn * forward_flops_per_token(shapes, turn / 2),
                                  seconds=4)
    return rates


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--output", type=Path, default=RESULTS)
    args = parser.parse_args()
    shapes = student_shapes()
    roofline: dict[str, dict[str, float]] = {}
    stages: dict[str, dict[str, dict[str, float]]] = {}
    precisions = [("fp32", torch.float32), *([("bf16", torch.bfloat16)] if bf16_units() else [])]
    for threads in args.threads:
        torch.set_num_threads(threads)
        for name, dtype in (("fp32", torch.float32), ("bf16", torch.bfloat16)):
            key = f"{name}_{threads}t"
            roofline[key] = {f"rows_{rows}": round(matmul_roofline(shapes, rows, dtype) / 1e9, 2)
                             for rows in (16, 64, 4096)}
            print("roofline GFLOP/s", key, roofline[key], flush=True)
        for name, dtype in precisions:
            key = f"{name}_{threads}t"
            stages[key] = {}
            for stage, rate in stage_rates(dtype).items():
                shape = "rows_4096" if stage in ("sft", "sft_autocast", "prefill", "grpo_scoring") else f"rows_{stage.split('_')[1]}"
                stages[key][stage] = {"gflops": round(rate / 1e9, 2),
                                      "fraction_of_fp32": round(rate / 1e9 / roofline[f"fp32_{threads}t"][shape], 3),
                                      "fraction_of_bf16": round(rate / 1e9 / roofline[f"bf16_{threads}t"][shape], 3)}
            print("stages", key, stages[key], flush=True)
    report = {
        "benchmark": "roofline", "command": f"OMP_NUM_THREADS={os.environ['OMP_NUM_THREADS']} {command_line()}",
        "unit": "GFLOP/s", "shapes": shapes, "prompt_tokens": PROMPT_TOKENS,
        "flops_per_token": {"forward_no_attention": forward_flops_per_token(shapes, 0),
                            "forward_at_context_290": forward_flops_per_token(shapes, PROMPT_TOKENS)},
        "roofline": roofline, "stages": stages,
        "note": "absolute figures hold for a machine as quiet as machine.load_average_1_5_15_min says; ratios "
                "measured in one run",
    }
    write_report(args.output, report)
    print(f"wrote {args.output}")


if __name__ == "__main__":
    main()
