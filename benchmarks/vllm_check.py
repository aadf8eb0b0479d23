"""GRPO generating with TRL's vLLM integration, checked on a GPU (nothing here runs without one).

    python benchmarks/vllm_check.py [--model Qwen/Qwen3-0.6B | PATH]   # needs 2 CUDA GPUs and `pip install trl[vllm]`

Starts ``trl vllm-serve`` on the model (weight transfer enabled so the trainer can push its weights), then runs
two GRPO steps whose episodes generate every turn on that server (``GRPOSettings.vllm_server_url``): TRL syncs
the trained weights to the server before each step, the rollouts go through the same BPE harness and fast
engine as in-process generation. Reports turns generated per second against in-process HF ``generate`` on the
same settings and checks that both runs trained. Writes benchmarks/results/vllm_check.json. Without a GPU or
vLLM it says so and exits 2 without writing anything. Two GPUs: the server runs on GPU 1 ($VLLM_GPU) and the
trainer on GPU 0, because TRL's NCCL weight transfer cannot pair two ranks on one device.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

from report import RESULTS, write_report

OUTPUT = RESULTS / "vllm_check.json"
COMMAND = "python benchmarks/vllm_check.py"


def available() -> str | None:
    """Why the check cannot run here, or None."""
    import importlib.util

    import torch

    if torch.cuda.device_count() < 2:
        return f"{torch.cuda.device_count()} CUDA GPU(s); the server and the trainer need one each"
    if importlib.util.find_spec("vllm") is None:
        return "vllm is not installed (pip install trl[vllm])"
    return None


def start_server(model: str, port: int, log: Path) -> subprocess.Popen:
    command = [sys.executable, "-m", "trl.scripts.vllm_serve", "--model", model, "--port", str(port),
               "--gpu_memory_utilization", "0.4"]
    server = subprocess.Popen(command, stdout=log.open("w"), stderr=subprocess.STDOUT,
                              env=os.environ | {"CUDA_VISIBLE_DEVICES": os.environ.get("VLLM_GPU", "1")})
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline:
        if server.poll() is not None:
            raise RuntimeError(f"trl vllm-serve exited: {log.read_text()[-3000:]}")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health/", timeout=5):
                return server
        except OSError:
            time.sleep(5)
    server.kill()
    raise TimeoutError("trl vllm-serve did not come up within 10 minutes")


def grpo_run(model: str, folder: Path, vllm_url: str | None) -> dict:
    from evoharness.training.grpo import train_grpo
    from evoharness.training.grpo_config import GRPOSettings

    settings = GRPOSettings(games_per_step=2, num_generations=4, games_limit=4, max_steps=2, episode_steps=10,
                            max_new_tokens=128, learning_rate=1e-6, per_device_train_batch_size=8, save_steps=None,
                            bf16=True, vllm_server_url=vllm_url)
    result = train_grpo(model, folder, settings)
    turns = sum(h.get("samples/turns", 0.0) for h in result.history)
    return {"vllm": vllm_url is not None, "steps": result.steps, "seconds": round(result.seconds, 1),
            "turns": turns, "turns_per_second": round(turns / result.seconds, 2),
            "losses": [h.get("loss") for h in result.history]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="Qwen/Qwen3-0.6B")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--output", type=Path, default=OUTPUT)
    args = parser.parse_args()
    reason = available()
    if reason:
        print(f"vLLM check skipped: {reason}")
        sys.exit(2)
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        server = start_server(args.model, args.port, folder / "vllm.log")
        try:
            served = grpo_run(args.model, folder / "vllm", f"http://127.0.0.1:{args.port}")
        finally:
            server.terminate()
            server.wait(timeout=60)
        local = grpo_run(args.model, folder / "hf", None)
    checks = {"both_trained": served["steps"] == local["steps"] == 2,
              "vllm_generated_turns": served["turns"] > 0}
    result = {"command": COMMAND, "model": args.model, "vllm": served, "hf_generate": local, "checks": checks,
              "speedup": round(served["turns_per_second"] / max(local["turns_per_second"], 1e-9), 2)}
    write_report(args.output, result, indent=1)
    print(f"{'':22}{'vLLM server':>14}{'HF generate':>14}")
    for key in ("seconds", "turns", "turns_per_second"):
        print(f"{key:22}{served[key]:>14}{local[key]:>14}")
    print(f"speedup {result['speedup']}x; checks {checks}; wrote {args.output}")
    sys.exit(0 if all(checks.values()) else 1)


if __name__ == "__main__":
    main()
