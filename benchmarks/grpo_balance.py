"""GRPO under two processes: TRL's contiguous split of a step's episodes against the balanced layout (each process
plays every second episode, and the turns are dealt by tokens before the loss), on the same recorded episodes.

    OMP_NUM_THREADS=1 ALFWORLD_DATA=../shared/alfworld python benchmarks/grpo_balance.py \\
        --model SFT_MODEL [--games-from GRPO_MODEL | --games G1 G2 ...] [--steps 2 --repeats 2]

The SFT student plays ``--steps`` × 4 games × 4 episodes once, as GRPO's rollouts would (the recipe's sampling,
guided groups and budget); then the same GRPO job trains on those recorded episodes under ``accelerate launch
--num_processes 2`` in each layout, the layouts alternating ``--repeats`` times. Both layouts train the same
episodes, so the loss and the update must agree (float order); the rollout phase is left out of the timing (the
recorded episodes replay instantly) and is reported as each process's share of the episodes' turns, which is what
its generation time follows. A rerun with the same ``--workdir`` keeps the recording and the finished runs. Writes
``benchmarks/results/grpo_balance.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from report import RESULTS, accelerate_launch, write_report

os.environ.setdefault("OMP_NUM_THREADS", "1")
OUTPUT = RESULTS / "grpo_balance.json"
LAYOUTS = ("contiguous", "balanced")


def settings(games: list[str], steps: int) -> Any:
    from evoharness.training.recipes import load_recipe

    recipe = load_recipe("small").grpo
    return recipe.model_copy(update={"games": games, "games_limit": None, "max_steps": steps, "save_steps": None,
                                     "logging_steps": 1})


def record(model: str, games: list[str], steps: int, out: Path) -> None:
    """The student's episodes on the games, as GRPO's rollouts play them, saved as fixed rollouts."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from evoharness.harness.prompts import Mode
    from evoharness.training.fixed_rollouts import FixedRollouts
    from evoharness.training.grpo import rollout_engine
    from evoharness.training.student_card import student_prompt_set

    grpo = settings(games, steps)
    engine = rollout_engine(grpo, None, None, "fast", student_prompt_set(model, Mode.BPE))
    group = grpo.num_generations
    try:
        played = engine.play([g for g in games for _ in range(group)], AutoModelForCausalLM.from_pretrained(model),
                             AutoTokenizer.from_pretrained(model), round_id=0)
    finally:
        engine.close()
    episodes = {(r.record.spec.game.game_id, i % group): r for i, r in enumerate(played)}
    FixedRollouts(episodes, group).save(out)


def worker(model: str, rollouts: Path, games: list[str], steps: int, layout: str, out: Path) -> None:
    """One process of the GRPO job in ``layout``; the main process writes step times, losses and the model."""
    from accelerate.utils import gather_object
    from transformers import TrainerCallback

    from evoharness.training.fixed_rollouts import FixedRollouts
    from evoharness.training.grpo import build_grpo_trainer
    from evoharness.training.trainer_utils import save_trained

    trainer = build_grpo_trainer(model, out, settings(games, steps), FixedRollouts.load(rollouts))
    trainer.layout = layout
    ends: list[float] = []

    class StepClock(TrainerCallback):  # type: ignore[misc]
        def on_step_end(self, *args: Any, **kwargs: Any) -> None:
            ends.append(time.perf_counter())

    trainer.add_callback(StepClock())
    started = time.perf_counter()
    trainer.train()
    turns = gather_object([{"round": r["round"], "process": trainer.accelerator.process_index,
                            "turns": sum(e["turns"] for e in r["episodes"])} for r in trainer.turn_log])
    save_trained(trainer, trainer.processing_class, out / "model", merged_lora=False)
    if trainer.is_world_process_zero():
        history = trainer.state.log_history
        (out / "run.json").write_text(json.dumps({
            "step_seconds": [round(b - a, 1) for a, b in zip([started, *ends], ends, strict=False)],
            "losses": [h["loss"] for h in history if "loss" in h],
            "token_imbalance": [h["samples/token_imbalance"] for h in history if "samples/token_imbalance" in h],
            "rollout_turns": turns}))


def compare(model: str, games: list[str], steps: int, repeats: int, workdir: Path) -> dict[str, Any]:
    from safetensors.torch import load_file

    rollouts = workdir / "rollouts.pkl"
    workdir.mkdir(parents=True, exist_ok=True)
    recording: dict[str, float] = {}
    if not rollouts.exists():  # a rerun with the same --workdir replays the episodes it recorded
        started = time.perf_counter()
        record(model, games, steps, rollouts)
        recording["recording_seconds"] = round(time.perf_counter() - started, 1)
    runs: dict[str, list[dict[str, Any]]] = {layout: [] for layout in LAYOUTS}
    for repeat in range(repeats):  # alternating, so drift in the machine's load hits both
        for layout in LAYOUTS:
            out = workdir / f"{layout}-{repeat}"
            done = out / "run.json"
            if not (done.exists() and "wall_seconds" in json.loads(done.read_text())):  # a rerun keeps finished runs
                seconds = accelerate_launch(Path(__file__).resolve(), [
                    "worker", "--model", model, "--rollouts", str(rollouts), "--steps", str(steps), "--layout",
                    layout, "--out", str(out), "--games", *games], processes=2, port=29610 + repeat,
                    timeout_s=4 * 3600)
                done.write_text(json.dumps(json.loads(done.read_text()) | {"wall_seconds": round(seconds, 1)}))
            run = json.loads(done.read_text())
            runs[layout].append(run)
            print(layout, repeat, {k: v for k, v in run.items() if k != "rollout_turns"}, flush=True)
    final = {layout: load_file(str(workdir / f"{layout}-0" / "model" / "model.safetensors")) for layout in LAYOUTS}
    update_gap = max(float((final["contiguous"][k] - final["balanced"][k]).abs().max()) for k in final["balanced"])
    loss_gap = max(abs(a - b) for a, b in zip(runs["contiguous"][0]["losses"], runs["balanced"][0]["losses"],
                                              strict=True))

    def rollout_imbalance(run: dict[str, Any]) -> list[float]:
        by_round: dict[int, list[int]] = {}
        for entry in run["rollout_turns"]:
            by_round.setdefault(entry["round"], []).append(entry["turns"])
        return [round(max(t) / (sum(t) / len(t)), 3) for _, t in sorted(by_round.items())]

    summary = {layout: {
        "step_seconds_mean": round(sum(sum(r["step_seconds"]) for r in rs) / sum(len(r["step_seconds"]) for r in rs),
                                   1),
        "step_seconds": [r["step_seconds"] for r in rs],
        "token_imbalance": rs[0]["token_imbalance"],
        "rollout_turn_imbalance": rollout_imbalance(rs[0]),
    } for layout, rs in runs.items()}
    return {
        "model": model, "games": games, "steps": steps, "repeats": repeats, "processes": 2,
        "recorded_turns": sum(sum(e["turns"] for e in r["rollout_turns"]) for r in runs["balanced"][:1]),
        **recording, "layouts": summary,
        "ratio_step_seconds": round(summary["contiguous"]["step_seconds_mean"]
                                    / summary["balanced"]["step_seconds_mean"], 2),
        "max_loss_gap": loss_gap, "max_parameter_gap": update_gap,
        "same_update": update_gap < 1e-4,
        "note": "fp32, 2 processes (gloo), OMP_NUM_THREADS=1; the rollout phase replays recorded episodes",
    }


def games_from(version_dir: str, count: int) -> list[str]:
    """The first ``count`` games a GRPO model version trained on (its student card's ``games``)."""
    card = json.loads((Path(version_dir) / "evoharness_student.json").read_text())
    games = card.get("settings", {}).get("games")
    if not games:
        raise SystemExit(f"{version_dir} names no GRPO games (not a GRPO model version?)")
    return list(games)[:count]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("mode", nargs="?", default="compare", choices=["compare", "worker"])
    parser.add_argument("--model", required=True, help="the SFT student (a model folder)")
    parser.add_argument("--games", nargs="*", default=None, help="train games (default: from --games-from)")
    parser.add_argument("--games-from", help="a GRPO model folder: its curriculum's games")
    parser.add_argument("--steps", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--rollouts", type=Path)
    parser.add_argument("--layout", choices=LAYOUTS)
    parser.add_argument("--out", type=Path)
    parser.add_argument("--workdir", type=Path)
    parser.add_argument("--output", type=Path, default=OUTPUT)
    args = parser.parse_args()
    if args.mode == "worker":
        worker(args.model, args.rollouts, args.games, args.steps, args.layout, args.out)
        return
    games = args.games or (games_from(args.games_from, 4 * args.steps) if args.games_from else None)
    if not games or len(games) < 4 * args.steps:
        sys.exit(f"need {4 * args.steps} games: pass --games or --games-from")
    with tempfile.TemporaryDirectory() as tmp:
        result = compare(args.model, games[:4 * args.steps], args.steps, args.repeats, args.workdir or Path(tmp))
    write_report(args.output, result, indent=1)
    for layout, row in result["layouts"].items():
        print(f"{layout:12} step {row['step_seconds_mean']:>7.1f} s  token imbalance {row['token_imbalance']}  "
              f"rollout turn imbalance {row['rollout_turn_imbalance']}")
    print(f"contiguous / balanced: {result['ratio_step_seconds']}×; same update: {result['same_update']} "
          f"(max parameter gap {result['max_parameter_gap']:.2e})")
    print(f"wrote {args.output}")


if __name__ == "__main__":
    main()
