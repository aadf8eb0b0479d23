"""GRPO in one process vs two (``accelerate launch``, gloo on CPU) on the same fixed rollouts; SFT in two processes.

    python benchmarks/grpo_multiprocess.py          # ~2-3 min on 2 cores

A tiny student (random weights) and fixed expert rollouts (4 train games, groups of 2 with a 30- and a 4-step
budget) are prepared once; then the same GRPO job (2 games × 2 episodes per step, 3 steps, micro-batches of 4
turns, β 0.01) runs under ``accelerate launch --num_processes 1`` and ``--num_processes 2``. Each process plays
its half of a step's episodes; rewards are gathered and normalized over all of them and each process keeps its
own slice. The runs must give the same per-turn advantages, the same loss at every step and the same parameter
update (float tolerance). Then SFT runs 3 steps under two processes. Writes
benchmarks/results/grpo_multiprocess.json; exits non-zero when a comparison fails.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path

from report import RESULTS, accelerate_launch, write_report

REPO = Path(__file__).resolve().parents[1]
OUTPUT = RESULTS / "grpo_multiprocess.json"
COMMAND = "python benchmarks/grpo_multiprocess.py"
os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("ALFWORLD_DATA", str(REPO.parent / "shared" / "alfworld"))
GAMES, GROUP, STEPS, MICRO = 4, 2, 3, 4


def grpo_settings():  # type: ignore[no-untyped-def]
    from evoharness.training.recipes import load_recipe

    return load_recipe("tiny", values={"grpo.games_limit": GAMES, "grpo.games_per_step": 2,
                                       "grpo.num_generations": GROUP, "grpo.max_steps": STEPS,
                                       "grpo.per_device_train_batch_size": MICRO, "grpo.learning_rate": 1e-3,
                                       "grpo.logging_steps": 1}, overrides=["grpo.save_steps=null"]).grpo


def prepare(workdir: Path) -> None:
    """The tiny student, the fixed rollouts and an SFT dataset made of the rollouts' turns."""
    import datasets
    from transformers import AutoTokenizer

    from evoharness.envs.alfworld import GameCatalog
    from evoharness.training.fixed_rollouts import record_expert_rollouts
    from evoharness.training.tiny_student import TinyStudentSpec, build_tiny_student

    games = [g.game_id for g in GameCatalog().games("train", GAMES)]
    corpus = [p.read_text() for p in (REPO / "teacher_prompts" / "alfworld").glob("*.j2")]
    model_dir = build_tiny_student(workdir / "student", corpus, TinyStudentSpec(vocab_size=512))
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    fixed = record_expert_rollouts(games, tokenizer, group=GROUP, budgets=(30, 4), prompt_tokens=48,
                                   completion_tokens=16)
    fixed.save(workdir / "rollouts.pkl")
    rows = [{"messages": [{"role": "system", "content": "Play ALFWorld."},
                          {"role": "user", "content": s.prompt[-200:]},
                          {"role": "assistant", "content": s.raw_output}]}
            for r in fixed.episodes.values() for s in r.record.steps]
    datasets.DatasetDict({"train": datasets.Dataset.from_list(rows[:-8]),
                          "validation": datasets.Dataset.from_list(rows[-8:])}).save_to_disk(workdir / "sft_data")


def grpo_worker(workdir: Path, out: Path) -> None:
    """One process of the GRPO job; the main process writes advantages, losses and the trained model."""
    from accelerate.utils import gather_object

    from evoharness.training.fixed_rollouts import FixedRollouts
    from evoharness.training.grpo import build_grpo_trainer
    from evoharness.training.trainer_utils import save_trained

    trainer = build_grpo_trainer(str(workdir / "student"), out, grpo_settings(),
                                 FixedRollouts.load(workdir / "rollouts.pkl"))
    trainer.train()
    episodes = gather_object([{"round": r["round"]} | e for r in trainer.turn_log for e in r["episodes"]])
    save_trained(trainer, trainer.processing_class, out / "model", merged_lora=False)
    if trainer.is_world_process_zero():
        losses = [(h["step"], h["loss"]) for h in trainer.state.log_history if "loss" in h]
        (out / "run.json").write_text(json.dumps({
            "processes": trainer.accelerator.num_processes, "episodes": episodes, "losses": losses,
            "turns": [h["samples/turns"] for h in trainer.state.log_history if "samples/turns" in h],
            "peak_micro_batch": trainer.peak_micro_batch}))


def sft_worker(workdir: Path, out: Path) -> None:
    from evoharness.training.sft import SFTSettings, train_sft

    settings = SFTSettings(base_model=str(workdir / "student"), lora=None, learning_rate=1e-3, batch_size=4,
                           per_device_batch_size=2, max_length=1024, max_steps=3, logging_steps=1)
    result = train_sft(str(workdir / "sft_data"), out, settings)
    if int(os.environ.get("RANK", "0")) == 0:
        (out / "run.json").write_text(json.dumps({"steps": result.steps, "losses": result.loss_history,
                                                  "processes": int(os.environ.get("WORLD_SIZE", "1"))}))


def launch(mode: str, processes: int, workdir: Path, out: Path) -> float:
    return accelerate_launch(Path(__file__).resolve(), [mode, "--workdir", str(workdir), "--out", str(out)],
                             processes, port=29500 + processes)


def parameters(folder: Path) -> dict:
    from safetensors.torch import load_file

    return load_file(str(folder / "model.safetensors"))


def compare(workdir: Path) -> dict:
    """Both GRPO runs and the SFT run; the comparison as a dict (``match``: every check passed)."""
    import torch

    prepare(workdir)
    seconds = {n: launch("grpo", n, workdir, workdir / f"grpo-{n}") for n in (1, 2)}
    runs = {n: json.loads((workdir / f"grpo-{n}" / "run.json").read_text()) for n in (1, 2)}
    advantages = {n: {(e["round"], e["index"]): e["advantage"] for e in runs[n]["episodes"]} for n in (1, 2)}
    start = parameters(workdir / "student")
    final = {n: parameters(workdir / f"grpo-{n}" / "model") for n in (1, 2)}
    update = {n: torch.cat([(final[n][k] - start[k]).flatten() for k in sorted(start)]) for n in (1, 2)}
    update_gap = float((update[1] - update[2]).norm() / update[1].norm())
    param_gap = max(float((final[1][k] - final[2][k]).abs().max()) for k in start)
    loss_gap = max(abs(a[1] - b[1]) / max(abs(a[1]), 1e-8) for a, b in zip(runs[1]["losses"], runs[2]["losses"],
                                                                              strict=True))
    sft_seconds = launch("sft", 2, workdir, workdir / "sft-2")
    sft = json.loads((workdir / "sft-2" / "run.json").read_text())
    checks = {
        "same_advantages": advantages[1].keys() == advantages[2].keys()
        and all(abs(advantages[1][k] - advantages[2][k]) < 1e-6 for k in advantages[1]),
        "advantages_carry_signal": any(abs(v) > 0.1 for v in advantages[1].values()),
        "same_losses": len(runs[1]["losses"]) == len(runs[2]["losses"]) == STEPS and loss_gap < 1e-4,
        "same_update": update[1].norm() > 0 and update_gap < 1e-4,
        "micro_batches_bounded": runs[1]["peak_micro_batch"] <= MICRO and runs[2]["peak_micro_batch"] <= MICRO,
        "sft_two_processes": sft["processes"] == 2 and sft["steps"] == 3
        and (workdir / "sft-2" / "model" / "model.safetensors").is_file(),
    }
    return {
        "command": COMMAND, "checks": checks, "match": all(checks.values()),
        "grpo": {str(n): {"processes": runs[n]["processes"], "seconds": round(seconds[n], 1),
                          "losses": runs[n]["losses"], "turns_per_step": runs[n]["turns"],
                          "peak_micro_batch": runs[n]["peak_micro_batch"],
                          "update_norm": round(float(update[n].norm()), 6)} for n in (1, 2)},
        "relative_loss_gap": loss_gap, "relative_update_gap": update_gap, "max_parameter_gap": param_gap,
        "advantages": sorted([list(k) + [v] for k, v in advantages[1].items()]),
        "sft": sft | {"seconds": round(sft_seconds, 1)},
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("mode", nargs="?", default="compare", choices=["compare", "grpo", "sft"])
    parser.add_argument("--workdir", type=Path)
    parser.add_argument("--out", type=Path)
    parser.add_argument("--output", type=Path, default=OUTPUT)
    args = parser.parse_args()
    if args.mode == "grpo":
        grpo_worker(args.workdir, args.out)
        return
    if args.mode == "sft":
        sft_worker(args.workdir, args.out)
        return
    with tempfile.TemporaryDirectory() as tmp:
        result = compare(args.workdir or Path(tmp))
    write_report(args.output, result, indent=1)
    print(f"{'':24}{'1 process':>14}{'2 processes':>14}")
    for i, (a, b) in enumerate(zip(result["grpo"]["1"]["losses"], result["grpo"]["2"]["losses"], strict=True)):
        print(f"{f'loss, step {i + 1}':24}{a[1]:>14.6f}{b[1]:>14.6f}")
    print(f"{'update norm':24}{result['grpo']['1']['update_norm']:>14.6f}{result['grpo']['2']['update_norm']:>14.6f}")
    print(f"{'seconds':24}{result['grpo']['1']['seconds']:>14.1f}{result['grpo']['2']['seconds']:>14.1f}")
    print(f"relative loss gap {result['relative_loss_gap']:.2e}, relative update gap "
          f"{result['relative_update_gap']:.2e}, max parameter gap {result['max_parameter_gap']:.2e}")
    print(f"SFT in 2 processes: {result['sft']['steps']} steps, losses {result['sft']['losses']}")
    print("checks:", " ".join(f"{k}={'ok' if v else 'FAILED'}" for k, v in result["checks"].items()))
    print(f"wrote {args.output}")
    if not result["match"]:
        sys.exit(1)


if __name__ == "__main__":
    main()
