"""Jump-forward decoding (the tokens an action constraint forces, taken without a model pass each) against one pass
a token, side by side in one run, on the continuous engine that evaluation and GRPO rollouts share.

    OMP_NUM_THREADS=1 ALFWORLD_DATA=../shared/alfworld python benchmarks/jump_forward.py \\
        --model MODEL_DIR [--greedy-games 32] [--sampled-games 4] [--repeats 2] \\
        [--output benchmarks/results/jump_forward.json]

One process, one thread. Two workloads, each through the ``small`` recipe's rollout engine (its step budget, turn
length and continuous batch of 16), the arms (``jump_forward`` off, on) alternating ``--repeats`` times, the best
run of each counting:

* ``greedy``: the first ``--greedy-games`` train games once each, greedily, as evaluation plays: both arms must take
  the same turns (every completion compared), so their times compare directly;
* ``sampled``: the recipe's GRPO rollouts (``--sampled-games`` games x its group, guided episodes included): forced
  tokens draw no random numbers with jump-forward on, so the arms' episodes differ and compare per turn only.

Reported per arm: seconds, turns, ms per turn, model passes (decode steps) per turn, tokens forced per turn.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any

os.environ.setdefault("OMP_NUM_THREADS", "1")
sys.path.insert(0, str(Path(__file__).resolve().parent))

from report import command_line, write_report
from rollout_precision import timed_rollouts

RESULTS = Path(__file__).resolve().parent / "results" / "jump_forward.json"
ARMS = {"one_pass_a_token": False, "jump_forward": True}


def play(model_dir: str, workload: str, games: int, jump_forward: bool) -> dict[str, Any]:
    """One arm of one workload: time, turns, passes and forced tokens (the completions' texts under ``_texts``)."""
    import torch

    from evoharness.teachers.clients.hf_batching import Sampling
    from evoharness.training.grpo import training_games
    from evoharness.training.recipes import load_recipe

    torch.manual_seed(0)
    settings = load_recipe("small").grpo
    engine: dict[str, Any] = {}
    if workload == "greedy":
        game_ids = training_games(settings)[:games]
        engine["sampling"] = Sampling(max_new_tokens=settings.max_new_tokens)
    else:
        game_ids = [g for g in training_games(settings)[:games] for _ in range(settings.num_generations)]
    played, seconds, generators, tokenizer = timed_rollouts(model_dir, settings, game_ids,
                                                            {"jump_forward": jump_forward}, **engine)
    turns = [t for r in played for t in r.turns]
    stats = [s for g in generators for s in g.decoder_stats]
    steps, forced = sum(s.steps for s in stats), sum(s.forced for s in stats)
    generated = sum(len(t.completion_ids) for t in turns)
    return {"seconds": round(seconds, 2), "episodes": len(played), "turns": len(turns),
            "won": sum(r.record.won for r in played), "ms_per_turn": round(1000 * seconds / len(turns), 1),
            "completion_tokens_per_turn": round(generated / len(turns), 2),
            "passes_per_turn": round(steps / len(turns), 2), "forced_tokens_per_turn": round(forced / len(turns), 2),
            "_texts": [tokenizer.decode(t.completion_ids) for t in turns]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", required=True, help="A student's model directory (an SFT version's model/).")
    parser.add_argument("--greedy-games", type=int, default=32, help="Train games played once each, greedily.")
    parser.add_argument("--sampled-games", type=int, default=4, help="Train games, each played by a GRPO group.")
    parser.add_argument("--repeats", type=int, default=2, help="Times the arms alternate (the best run counts).")
    parser.add_argument("--output", type=Path, default=RESULTS)
    args = parser.parse_args()
    report: dict[str, Any] = {"benchmark": "jump_forward", "command": command_line()}
    for workload, games in (("greedy", args.greedy_games), ("sampled", args.sampled_games)):
        runs: dict[str, list[dict[str, Any]]] = {arm: [] for arm in ARMS}
        for repeat in range(args.repeats):
            for arm, jump_forward in ARMS.items():
                runs[arm].append(play(args.model, workload, games, jump_forward))
                print(workload, repeat, arm, {k: v for k, v in runs[arm][-1].items() if k != "_texts"}, flush=True)
        texts = {arm: results[0].pop("_texts") for arm, results in runs.items()}
        for results in runs.values():
            for result in results:
                result.pop("_texts", None)
        best = {arm: min(results, key=lambda r: r["ms_per_turn"]) for arm, results in runs.items()}
        off, on = best["one_pass_a_token"], best["jump_forward"]
        report[workload] = {"runs": runs, "best": best, "ratio_per_turn": round(off["ms_per_turn"] / on["ms_per_turn"], 2),
                            "passes_saved": round(1 - on["passes_per_turn"] / off["passes_per_turn"], 3)}
        if workload == "greedy":
            pairs = list(zip(texts["one_pass_a_token"], texts["jump_forward"], strict=False))
            report[workload] |= {"turns_compared": len(pairs), "turns_identical": sum(a == b for a, b in pairs),
                                 "same_turn_count": len(texts["one_pass_a_token"]) == len(texts["jump_forward"])}
        print(workload, {k: v for k, v in report[workload].items() if k not in ("runs", "best")}, flush=True)
    report["note"] = ("one process, OMP_NUM_THREADS=1; ratios from one run (arms alternating, best of --repeats); "
                      "sampled episodes differ between arms, so only per-turn rates compare")
    write_report(args.output, report)


if __name__ == "__main__":
    main()
