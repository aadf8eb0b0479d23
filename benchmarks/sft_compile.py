"""An SFT step of the ``small`` student eager against ``torch.compile``, side by side in one run (issue #28: SFT at
the roofline; the work around the matmuls binds on a CPU with bf16 units).

    OMP_NUM_THREADS=1 python benchmarks/sft_compile.py [--dataset DIR --steps 300]
                                                             # writes benchmarks/results/sft_compile.json

The step is the one the SFT trainer takes: forward, backward and fused AdamW on fp32 weights, under bf16 autocast
where the CPU has bf16 units (the ``small`` recipe's ``bf16: auto``) and in fp32 everywhere; the batch is 14
examples of 290 tokens (``roofline.py``'s). ``compiled`` wraps the model in ``torch.compile`` (what the trainer's
``torch_compile`` does); its compile time is reported apart from the steady rate. Useful FLOP/s and the fraction of
the matmul roofline of the same precision come from ``roofline.py``'s counts.

With ``--dataset`` (a curated SFT dataset folder) the real trainer runs too: ``train_sft`` with the ``small``
recipe's settings for ``--steps`` optimizer steps in this one process, eager then with ``sft.torch_compile``; its
seconds include the compiling, and the last losses show the two trainings are the same up to rounding.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("OMP_NUM_THREADS", "1")

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from report import command_line, write_report
from roofline import (
    PROMPT_TOKENS,
    _rate,
    forward_flops_per_token,
    matmul_roofline,
    small_model,
    student_shapes,
)

from evoharness.training.hardware import bf16_units

RESULTS = Path(__file__).resolve().parent / "results" / "sft_compile.json"
EXAMPLES = 4096 // PROMPT_TOKENS


def step_rate(precision: str, compiled: bool, seconds: float) -> dict[str, float]:
    """Useful FLOP/s of SFT steps, and the seconds the first (compiling) step took."""
    shapes = student_shapes()
    model: Any = small_model(torch.float32).train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)
    forward = torch.compile(model) if compiled else model
    ids = torch.randint(0, shapes["vocab"], (EXAMPLES, PROMPT_TOKENS))
    autocast = torch.autocast("cpu", dtype=torch.bfloat16) if precision == "bf16" else contextlib.nullcontext()

    def step() -> None:
        with autocast:
            loss = forward(input_ids=ids, labels=ids).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()

    started = time.perf_counter()
    step()
    first = time.perf_counter() - started
    flops = 3 * EXAMPLES * PROMPT_TOKENS * forward_flops_per_token(shapes, PROMPT_TOKENS / 2)
    rate = _rate(step, flops, seconds=seconds)
    return {"gflops": round(rate / 1e9, 2), "tokens_per_second": round(rate / flops * EXAMPLES * PROMPT_TOKENS, 1),
            "first_step_seconds": round(first, 2)}


def trainer_arms(dataset: str, steps: int, folder: Path) -> dict[str, dict[str, Any]]:
    """The small recipe's SFT on ``dataset`` for ``steps`` steps, eager and compiled: seconds (compiling
    included), non-padding input tokens per second, and the last logged training loss."""
    from evoharness.training.recipes import load_recipe
    from evoharness.training.sft import train_sft

    arms = {}
    for compiled in (False, True):
        settings = load_recipe("small", [f"sft.max_steps={steps}", "sft.decision_turns=0", "sft.save_steps=100000",
                                         f"sft.torch_compile={str(compiled).lower()}"]).sft
        result = train_sft(dataset, folder / ("compiled" if compiled else "eager"), settings)
        arm = f"trainer_{'bf16' if settings.bf16 else 'fp32'}_{'compiled' if compiled else 'eager'}"
        arms[arm] = {"steps": result.steps, "seconds": round(result.seconds, 1), "tokens": result.tokens_seen,
                     "tokens_per_second": round((result.tokens_seen or 0) / result.seconds, 1),
                     "last_loss": result.train_loss}
        print(arm, arms[arm], flush=True)
    return arms


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=9.0, help="timed seconds per arm (three windows)")
    parser.add_argument("--output", type=Path, default=RESULTS)
    parser.add_argument("--dataset", default=None, help="a curated SFT dataset folder: run the real trainer too")
    parser.add_argument("--steps", type=int, default=300, help="optimizer steps per trainer arm")
    parser.add_argument("--work-dir", type=Path, default=Path("/tmp/sft_compile"), help="trainer arms' folders")
    args = parser.parse_args()
    torch.set_num_threads(int(os.environ["OMP_NUM_THREADS"]))
    shapes = student_shapes()
    arms: dict[str, dict[str, float]] = {}
    for precision in ("fp32", *(("bf16",) if bf16_units() else ())):
        roofline = matmul_roofline(shapes, 4096, torch.bfloat16 if precision == "bf16" else torch.float32) / 1e9
        for compiled in (False, True):
            arm = f"{precision}_{'compiled' if compiled else 'eager'}"
            arms[arm] = step_rate(precision, compiled, args.seconds) | {"roofline_gflops": round(roofline, 2)}
            arms[arm]["fraction_of_roofline"] = round(arms[arm]["gflops"] / roofline, 3)
            print(arm, arms[arm], flush=True)
    ratios = {precision: round(arms[f"{precision}_compiled"]["gflops"] / arms[f"{precision}_eager"]["gflops"], 2)
              for precision in ("fp32", "bf16") if f"{precision}_eager" in arms}
    if args.dataset:
        trainer = trainer_arms(args.dataset, args.steps, args.work_dir)
        eager, compiled = (next(v for k, v in trainer.items() if k.endswith(end)) for end in ("eager", "compiled"))
        arms |= trainer
        ratios["trainer"] = round(compiled["tokens_per_second"] / eager["tokens_per_second"], 2)
    write_report(args.output, {
        "benchmark": "sft_compile", "command": f"OMP_NUM_THREADS={os.environ['OMP_NUM_THREADS']} {command_line()}",
        "batch": {"examples": EXAMPLES, "tokens": PROMPT_TOKENS}, "arms": arms, "compiled_over_eager": ratios,
        "torch": torch.__version__,
        "note": "one thread; arms measured one after another in one run on a machine as quiet as "
                "machine.load_average_1_5_15_min says"})
    print("compiled / eager:", ratios)
    print(f"wrote {args.output}")


if __name__ == "__main__":
    main()
