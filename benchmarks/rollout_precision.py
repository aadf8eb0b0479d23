"""GRPO rollouts decoded with the weights as stored (fp32) against bf16 copies (``grpo.bf16_rollouts``), side by side.

    OMP_NUM_THREADS=1 ALFWORLD_DATA=../shared/alfworld python benchmarks/rollout_precision.py \\
        --model MODEL_DIR [--games 4] [--repeats 2] [--output benchmarks/results/rollout_precision.json]

One process, one thread, as one GRPO training process rolls out: the ``small`` recipe's rollout engine (its
sampling, step budget, guided episodes and continuous batch) plays ``--games`` train games x the recipe's group
size from ``MODEL_DIR``, once per arm, the arms alternating ``--repeats`` times (the best run of each counts).
Sampled episodes take other paths under other numerics, so the arms are compared per turn and per generated
token, not per episode; the continuous batch's occupancy (rows per decode step) shows how much of a run its
longest episodes' tail took; won episodes are reported to show that the bf16 policy still plays, not to rank it
(that is the ``dev`` screen's job: ``benchmarks/students.py``).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("OMP_NUM_THREADS", "1")
sys.path.insert(0, str(Path(__file__).resolve().parent))

from report import command_line, write_report

from evoharness.harness.prompts import Mode
from evoharness.training.student_card import student_prompt_set

RESULTS = Path(__file__).resolve().parent / "results" / "rollout_precision.json"
ARMS = {"stored": False, "bf16": True}


def timed_rollouts(model_dir: str, settings: Any, game_ids: list[str], generator: dict[str, Any] | None = None,
                   **engine: Any) -> tuple[list[Any], float, list[Any], Any]:
    """The rollout engine of GRPO ``settings`` (its attributes updated by ``engine``, e.g. ``generation`` or
    ``sampling``, and its generators' by ``generator``, e.g. ``jump_forward``) playing one episode per entry of
    ``game_ids`` from ``model_dir`` in this process: the rollouts, the seconds they took, the generators that decoded
    them (their ``decoder_stats``) and the tokenizer."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from evoharness.training.grpo import rollout_engine

    rollouts = rollout_engine(settings, None, None, "fast", student_prompt_set(model_dir, Mode.BPE))
    for name, value in engine.items():
        setattr(rollouts, name, value)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype="auto")
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    generators: list[Any] = []
    make_generator = rollouts._generator

    def kept_generator(*args: Any) -> Any:
        generators.append(make_generator(*args))
        for name, value in (generator or {}).items():
            setattr(generators[-1], name, value)
        return generators[-1]

    rollouts._generator = kept_generator  # type: ignore[method-assign,assignment]
    try:
        started = time.perf_counter()
        played = rollouts.play(game_ids, model, tokenizer, round_id=0)
        seconds = time.perf_counter() - started
    finally:
        rollouts.close()
    return played, seconds, generators, tokenizer


def play(model_dir: str, games: int, bf16_rollouts: bool) -> dict[str, Any]:
    """One arm: the recipe's rollouts of ``games`` train games x its group size; time, turns and tokens."""
    import torch

    from evoharness.training.grpo import training_games
    from evoharness.training.recipes import load_recipe

    torch.manual_seed(0)
    settings = load_recipe("small").grpo.model_copy(update={"bf16": True, "bf16_rollouts": bf16_rollouts})
    game_ids = [g for g in training_games(settings)[:games] for _ in range(settings.num_generations)]
    rollouts, seconds, generators, _ = timed_rollouts(model_dir, settings, game_ids)
    turns = [t for r in rollouts for t in r.turns]
    generated = sum(len(t.completion_ids) for t in turns)
    rows = [n for g in generators for stats in g.decoder_stats for n in stats.rows_per_step]
    return {"seconds": round(seconds, 2), "episodes": len(rollouts), "turns": len(turns),
            "won": sum(r.record.won for r in rollouts),
            "prompt_tokens_per_turn": round(sum(len(t.prompt_ids) for t in turns) / len(turns), 1),
            "completion_tokens_per_turn": round(generated / len(turns), 1),
            "ms_per_turn": round(1000 * seconds / len(turns), 1),
            "generated_tokens_per_second": round(generated / seconds, 1),
            "decode_steps": len(rows), "mean_rows_per_decode_step": round(sum(rows) / len(rows), 1),
            "decode_steps_with_at_most_4_rows": round(sum(n <= 4 for n in rows) / len(rows), 2)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", required=True, help="A student's model directory (an SFT version's model/).")
    parser.add_argument("--games", type=int, default=4, help="Train games, each played by a group of episodes.")
    parser.add_argument("--repeats", type=int, default=2, help="Times the arms alternate (the best run counts).")
    parser.add_argument("--output", type=Path, default=RESULTS)
    args = parser.parse_args()
    runs: dict[str, list[dict[str, Any]]] = {arm: [] for arm in ARMS}
    for repeat in range(args.repeats):
        for arm, bf16_rollouts in ARMS.items():
            runs[arm].append(play(args.model, args.games, bf16_rollouts))
            print(repeat, arm, runs[arm][-1], flush=True)
    best = {arm: min(results, key=lambda r: r["ms_per_turn"]) for arm, results in runs.items()}
    report = {
        "benchmark": "rollout_precision", "command": command_line(), "runs": runs, "best": best,
        "ratio": {"per_turn": round(best["stored"]["ms_per_turn"] / best["bf16"]["ms_per_turn"], 2),
                  "per_generated_token": round(best["bf16"]["generated_tokens_per_second"]
                                               / best["stored"]["generated_tokens_per_second"], 2)},
        "note": "one process, OMP_NUM_THREADS=1; ratios from one run (arms alternating); sampled episodes differ "
                "between arms, so only per-turn and per-token rates compare",
    }
    write_report(args.output, report)
    print(report["ratio"])


if __name__ == "__main__":
    main()
