"""One JSON report per benchmark run: the measurement plus what its rerun needs.

Every benchmark script writes ``benchmarks/results/<name>.json`` through :func:`write_report`, which adds

- ``command``: the command line that made the report (a script may pass a redacted one, e.g. ``--db DB`` in
  place of a local path);
- ``commit``: the checked-out commit, and ``worktree_clean``: whether tracked files differed from it;
- ``machine``: platform, Python, CPU model and count, the CPU flags that decide training precision
  (``evoharness.training.hardware.bf16_is_fast``), and the torch version when torch is loaded.

Benchmarks are scripts run as ``python benchmarks/NAME.py``, so they import this module as ``report``.
"""

from __future__ import annotations

import json
import os
import platform
import shlex
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "benchmarks" / "results"
PRECISION_FLAGS = ("avx2", "avx512f", "avx512_bf16", "amx_tile", "amx_bf16")
ARGV = tuple(sys.argv)  # as the script was started: libraries may rewrite sys.argv later (the real engine does)


def command_line(argv: Sequence[str] | None = None) -> str:
    """The command that ran this script (its arguments at start-up), with the script's path relative to the
    repository."""
    argv = list(ARGV if argv is None else argv)
    script = Path(argv[0]) if argv else Path("?")
    try:
        script = script.resolve().relative_to(REPO)
    except ValueError:
        pass
    return shlex.join(["python", str(script), *argv[1:]])


def _git(*args: str) -> str | None:
    try:
        done = subprocess.run(["git", *args], cwd=REPO, capture_output=True, text=True, timeout=30, check=True)
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout.strip()


def commit() -> dict[str, Any]:
    """The checked-out commit (None outside a git checkout) and whether tracked files match it (result files under
    benchmarks/results/ aside: a report written earlier in the same session does not change the code that ran)."""
    head = _git("rev-parse", "HEAD")
    changes = _git("status", "--porcelain", "--untracked-files=no", "--", ".", ":(exclude)benchmarks/results") \
        if head else None
    return {"commit": head, "worktree_clean": None if changes is None else changes == ""}


def _cpuinfo() -> tuple[str | None, list[str]]:
    """CPU model name and the precision-relevant flags, from /proc/cpuinfo (Linux; elsewhere none)."""
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return None, []
    model = next((line.split(":", 1)[1].strip() for line in text.splitlines() if line.startswith("model name")),
                 None)
    flags_line = next((line for line in text.splitlines() if line.startswith("flags")), "")
    flags = set(flags_line.split(":", 1)[1].split()) if ":" in flags_line else set()
    return model, [flag for flag in PRECISION_FLAGS if flag in flags]


def machine() -> dict[str, Any]:
    """Facts about the machine that bear on a measurement; torch's version only if torch is already loaded."""
    model, flags = _cpuinfo()
    facts: dict[str, Any] = {"platform": platform.platform(), "python": platform.python_version(),
                             "cpu": model or platform.processor() or platform.machine(), "cpus": os.cpu_count(),
                             "cpu_flags": flags, "omp_num_threads": os.environ.get("OMP_NUM_THREADS")}
    if hasattr(os, "getloadavg"):  # what else ran: absolute speeds hold only on a machine this quiet
        facts["load_average_1_5_15_min"] = [round(x, 2) for x in os.getloadavg()]
    torch = sys.modules.get("torch")
    if torch is not None:
        facts["torch"] = getattr(torch, "__version__", None)
        cuda = getattr(torch, "cuda", None)
        if cuda is not None and cuda.is_available():
            facts["gpus"] = [cuda.get_device_name(i) for i in range(cuda.device_count())]
    return facts


def write_report(path: Path, report: Mapping[str, Any], *, command: str | None = None,
                 indent: int = 2) -> dict[str, Any]:
    """Write ``report`` to ``path`` as JSON with ``command``, ``commit``, ``worktree_clean`` and ``machine``.

    ``command`` defaults to the report's own ``command``, else this process's command line. The report's other
    keys come after it and before the facts added here (a ``machine`` key of ``report`` is replaced). Returns
    what was written."""
    written = {"command": command or report.get("command") or command_line(),
               **{k: v for k, v in report.items() if k != "command"},
               **commit(), "machine": machine()}
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(written, indent=indent) + "\n")
    return written


def this_checkout_env() -> dict[str, str]:
    """The environment with this checkout first on ``PYTHONPATH``: a command run from a worktree (``evoharness ...``
    through its console script) imports the worktree's code, not that of the checkout the package was installed
    from in editable mode."""
    return {"PYTHONPATH": os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH", "")) if p)}


def accelerate_launch(script: Path, args: Sequence[str], processes: int, port: int, timeout_s: float = 1200
                      ) -> float:
    """Run ``script args`` under ``accelerate launch`` with ``processes`` CPU processes (gloo; fp32), with the
    repository on the path; the wall seconds it took. A failure raises with the run's last output."""
    env = os.environ | this_checkout_env() | {"ACCELERATE_USE_CPU": "true"}
    # --multi_gpu selects accelerate's torch.distributed launcher; with ACCELERATE_USE_CPU the Trainer runs on
    # the CPU with the gloo backend (accelerate's --cpu flag would start a single process)
    command = [sys.executable, "-m", "accelerate.commands.launch", *(["--multi_gpu"] if processes > 1 else []),
               "--num_processes", str(processes), "--num_machines", "1", "--mixed_precision", "no",
               "--dynamo_backend", "no", "--main_process_port", str(port), str(script), *args]
    started = time.perf_counter()
    done = subprocess.run(command, check=False, env=env, cwd=REPO, capture_output=True, text=True,
                          timeout=timeout_s)
    if done.returncode:
        raise RuntimeError(f"{script.name} {' '.join(args)} with {processes} processes failed:\n"
                           f"{done.stdout[-3000:]}\n{done.stderr[-6000:]}")
    return time.perf_counter() - started
