"""What verifying an artefact folder costs: manifest writing and verification (full sha256 and size-only) of a
saved student of about 15 MB, and sha256 throughput on a larger file (which sets ``HASH_LIMIT_BYTES`` in
``evoharness/artifacts.py``). Writes ``benchmarks/results/artifact_verify.json``.

    python benchmarks/artifact_verify.py [--repeats 5] [--big-mb 500]
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")

from report import RESULTS, write_report

from evoharness.artifacts import HASH_LIMIT_BYTES, file_sha256, verify_artifact, write_manifest
from evoharness.training.tiny_student import TinyStudentSpec, build_tiny_student

MODEL = TinyStudentSpec(vocab_size=2048, hidden_size=384, intermediate_size=1280, num_hidden_layers=2,
                        num_attention_heads=4, head_dim=96)
"""A student whose saved folder is about 15 MB."""


def best_of(repeats: int, work: Callable[[], object]) -> float:
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        work()
        times.append(time.perf_counter() - started)
    return min(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--big-mb", type=int, default=500)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        folder = build_tiny_student(Path(tmp) / "model", ["go to the desk 1"] * 10, MODEL)
        size = sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())
        manifest_s = best_of(args.repeats, lambda: write_manifest(folder, "model"))
        full_s = best_of(args.repeats, lambda: verify_artifact(folder, "model", hash_limit_bytes=None))
        size_only_s = best_of(args.repeats, lambda: verify_artifact(folder, "model", hash_limit_bytes=0))
        big = Path(tmp) / "big.bin"
        big.write_bytes(os.urandom(2**20) * args.big_mb)
        sha_s = best_of(3, lambda: file_sha256(big))
    report = {"model_mb": round(size / 1e6, 1), "write_manifest_s": round(manifest_s, 4),
              "verify_full_hash_s": round(full_s, 4), "verify_size_only_s": round(size_only_s, 5),
              "sha256_gb_per_s": round(args.big_mb * 2**20 / 1e9 / sha_s, 2),
              "hash_limit_bytes": HASH_LIMIT_BYTES,
              "verify_at_hash_limit_s": round(HASH_LIMIT_BYTES / (args.big_mb * 2**20 / sha_s), 2)}
    for key, value in report.items():
        print(f"{key:<24} {value}")
    out = RESULTS / "artifact_verify.json"
    write_report(out, report)
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
