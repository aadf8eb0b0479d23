"""What the machine that trains can do fast."""

from __future__ import annotations

import subprocess
import sys
from functools import cache


def bf16_units() -> bool:
    """bf16 has hardware units here: a CUDA GPU that supports it, or a CPU with AMX tiles or AVX512-BF16 (imports
    torch)."""
    import torch

    if torch.cuda.is_available():
        return bool(torch.cuda.is_bf16_supported())
    return any(bool(getattr(torch.cpu, probe, lambda: False)()) for probe in
               ("_is_amx_tile_supported", "_is_avx512_bf16_supported"))


@cache
def bf16_is_fast() -> bool:
    """:func:`bf16_units`, asked without loading torch into this process when it has not loaded it already.

    Where the machine has no bf16 units (an AVX2-only CPU) torch runs bf16 matmuls in its reference GEMM, many
    times slower than fp32 (benchmarks/results/roofline.json). Dagster's process, which plans a run, never imports
    torch: it asks a short-lived child. The answer is of the machine that plans the run, which is the one that trains
    unless training goes elsewhere (then set ``bf16`` explicitly in the recipe)."""
    if "torch" in sys.modules:
        return bf16_units()
    probe = "from evoharness.training.hardware import bf16_units; print(int(bf16_units()))"
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=300)
    return done.stdout.strip().splitlines()[-1] == "1"


def training_attention(choice: str, bf16: bool, packed: bool = False) -> str:
    """The ``attn_implementation`` the training passes load the model with: ``choice``, or for ``auto`` eager where
    they run in bf16 on a CPU (torch's CPU flash kernel is slow there for a student's shapes:
    benchmarks/results/attention_kernels.json) and sdpa elsewhere (GPUs, fp32, and packed batches, whose
    per-example attention eager does not keep)."""
    if choice != "auto":
        return choice
    import torch

    return "eager" if bf16 and not packed and not torch.cuda.is_available() else "sdpa"
