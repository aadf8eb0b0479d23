"""The student path as issue #28 found it against today's, side by side in one run: evaluation, a GRPO step and SFT,
each also as a fraction of the machine's roofline (a ``benchmarks/roofline.py`` result; run it first).

    OMP_NUM_THREADS=1 ALFWORLD_DATA=../shared/alfworld python benchmarks/student_speed.py \\
        --model MODEL_DIR --dataset DATASET_DIR [--games N] [--sweep 16 32 64] [--roofline ROOFLINE_JSON]

* ``before``: generation by left-padded ``generate`` batches (``BatchGenerator(engine="batch")``), 16 episodes in
  flight, one process; the training passes through SDPA (``attention: sdpa``) with TRL's fused LM head projecting
  every position on a CPU (``scored_positions: all``).
* ``after``: today's defaults. One continuous batch over a slot key/value cache (``engine="continuous"``: refill at
  once, shared prompt prefix reused, the constraint as a precomputed mask), the episodes in flight chosen by
  ``--sweep``, in as many processes as ``evoharness evaluate`` uses (``collection_processes.local_processes``: one per
  core for a whole split); the training passes with ``attention: auto`` (eager in bf16 on a CPU) and the LM head
  projecting only the labelled positions (``scored_positions: labelled``).
* SFT: the recipe's own trainer (``train_sft``, padded length-grouped batches, the precision the hardware picks) for
  ``--sft-steps`` steps in its own process per arm, one thread, the arms alternating ``--sft-repeats`` times (the best
  run of each counts); TRL's ``padding_free`` packing is measured beside it
  as ``sft_packed_alternative`` (SDPA then attends over the whole packed sequence with a block mask on a CPU).

Evaluation plays the first ``--games`` games of each held-out split (all 274 with ``--games 0``) greedily; both paths
must take the same decisions: every stored turn's text is compared (``decisions``). A GRPO step is measured in its
two parts, each per turn and on the same work for both arms, since one sampled step's time is mostly how long its
episodes happen to run: the rollouts (the recipe's rollout engine playing the first ``--grpo-games`` train games
once each, greedily, 16 in flight in one process: the same turns on both paths) and the training passes (the
recipe's trainer for ``--grpo-steps`` steps on the expert's recorded turns of the first quarter of them, a group of
4 each); the step is their sum per turn. FLOPs count useful work only (``roofline.forward_flops_per_token``):
evaluation, prompt and completion tokens once forward; GRPO, each rollout token forward and each trained token 3
forward passes (forward and backward) of the policy and one of the reference; SFT, 3 forward passes per non-padding
token. Writes ``benchmarks/results/student_speed.json``.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("OMP_NUM_THREADS", "1")
sys.path.insert(0, str(Path(__file__).resolve().parent))

from report import command_line, write_report
from roofline import RESULTS as ROOFLINE
from roofline import forward_flops_per_token, student_shapes
from sft_buckets import arms_in_processes, timed_sft

from evoharness.collection import CollectionConfig, collect
from evoharness.collection_processes import collect_in_processes, local_processes
from evoharness.harness.prompts import Mode
from evoharness.teachers.clients.hf_batching import Engine
from evoharness.teachers.clients.local_hf import LocalHFClient
from evoharness.teachers.registry import Provider, TeacherRegistry, TeacherSpec
from evoharness.training.student_card import student_prompt_set
from warehouse import Warehouse

RESULTS = Path(__file__).resolve().parent / "results" / "student_speed.json"
SPLITS = ("valid_seen", "valid_unseen")
BEFORE_IN_FLIGHT = 16


def evaluation(model: str, engine: Engine, in_flight: int, games: int | None, folder: Path,
               max_steps: int = 70, processes: int = 1) -> dict[str, Any]:
    """Greedy evaluation of ``model`` on the held-out splits through ``engine`` in ``processes`` processes (spawned
    ones generate through the default engine, so more than one needs ``engine="continuous"``): wall seconds,
    turns/s, tokens."""
    if processes > 1 and engine != LocalHFClient.default_engine:
        raise ValueError(f"{processes} processes generate through the default engine, not {engine!r}")
    spec = TeacherSpec(name="student", provider=Provider.LOCAL_HF, model=model, price_in=0.0, price_out=0.0,
                       max_concurrency=in_flight, max_tokens=128, distill_games=None, mode=Mode.BPE,
                       prompt_template=student_prompt_set(model, Mode.BPE), constrain_actions=True)
    registry = TeacherRegistry([spec])
    LocalHFClient.default_engine = engine
    folder.mkdir(parents=True, exist_ok=True)
    with Warehouse(folder / "eval.duckdb") as wh:
        started = time.perf_counter()
        for split in SPLITS:
            config = CollectionConfig(teacher="student", split=split, limit=games, max_steps=max_steps,
                                      concurrency=in_flight, engine="fast", preflight=False)
            if processes > 1:
                wh.release()
                collect_in_processes(config, wh.path, f"speed-{split}", processes, registry)
            else:
                collect(config, wh, f"speed-{split}", registry=registry)
        wall = time.perf_counter() - started
        totals: Any = wh.con.execute("SELECT count(*), sum(input_tokens), sum(output_tokens) FROM steps").fetchone()
        turns, prompt_tokens, output_tokens = totals
        outcomes: Any = wh.con.execute("SELECT count(*), count(*) FILTER (won) FROM episodes").fetchone()
        episodes, won = outcomes
        decisions = wh.con.execute(
            "SELECT e.split, e.game_id, s.t, s.raw_output FROM steps s JOIN episodes e USING (episode_id)"
        ).fetchall()
    LocalHFClient.default_engine = "continuous"
    shapes = student_shapes()
    mean_prompt = prompt_tokens / turns
    flops = prompt_tokens * forward_flops_per_token(shapes, mean_prompt / 2, logits=False) \
        + output_tokens * forward_flops_per_token(shapes, mean_prompt + output_tokens / turns / 2)
    return {"eval_seconds": round(wall, 1), "eval_turns": turns, "eval_turns_per_second": round(turns / wall, 2),
            "eval_episodes": episodes, "eval_won": won, "eval_prompt_tokens_per_turn": round(mean_prompt, 1),
            "eval_output_tokens_per_turn": round(output_tokens / turns, 1),
            "eval_gflops_per_second": round(flops / wall / 1e9, 2), "in_flight": in_flight,
            "eval_processes": processes,
            "_decisions": {(split, game, t): text for split, game, t, text in decisions}}


def same_decisions(before: dict[tuple, str], after: dict[tuple, str]) -> dict[str, Any]:
    """Turns both paths played (same split, game and turn) and how many have the same text."""
    common = sorted(set(before) & set(after))
    differing = [key for key in common if before[key] != after[key]]
    first = differing[0] if differing else None
    return {"turns_compared": len(common), "turns_identical": len(common) - len(differing),
            "turns_only_one_path": len(set(before) ^ set(after)),
            "first_difference": None if first is None else {
                "split": first[0], "game": first[1], "t": first[2], "before": before[first],
                "after": after[first]}}


def grpo_rollouts(model: str, engine: Engine, games: int) -> dict[str, Any]:
    """A GRPO step's rollouts through ``engine``: the ``small`` recipe's rollout engine (its step budget, turn length
    and continuous batch of 16) playing the first ``games`` train games once each in one process, greedily, so both
    engines decode the same turns and keep the same rows in flight (sampled episodes would differ in length, and a
    step's rollouts take as long as their longest episodes): milliseconds per turn."""
    from rollout_precision import timed_rollouts

    from evoharness.teachers.clients.hf_batching import Sampling
    from evoharness.training.grpo import training_games
    from evoharness.training.recipes import load_recipe

    settings = load_recipe("small").grpo
    played, seconds, _, tokenizer = timed_rollouts(model, settings, training_games(settings)[:games],
                                                   generation=engine,
                                                   sampling=Sampling(max_new_tokens=settings.max_new_tokens))
    turns = [t for r in played for t in r.turns]
    tokens = sum(len(t.prompt_ids) + len(t.completion_ids) for t in turns)
    return {"grpo_rollout_ms_per_turn": round(1000 * seconds / len(turns), 1), "grpo_rollout_turns": len(turns),
            "grpo_rollout_tokens_per_turn": round(tokens / len(turns), 1),
            "_texts": [tokenizer.decode(t.completion_ids) for t in turns]}


def grpo_passes(model: str, passes: dict[str, str], fixed: Any, steps: int) -> dict[str, Any]:
    """A GRPO step's training passes (the policy's scoring, the reference's, the loss and its backward) with the
    recipe's settings updated by ``passes``, on recorded turns (``fixed``, the same for every arm): milliseconds
    per turn over ``steps`` steps."""
    from grpo_zero_advantage import train_arm

    from evoharness.training.recipes import load_recipe

    recipe = load_recipe("small").grpo
    settings = recipe.model_copy(update={
        "save_steps": None, "games_limit": len(fixed.episodes) // recipe.num_generations, "max_steps": steps,
        "guided_per_group": 0, "logging_steps": 1, **passes})
    run = train_arm(model, settings, fixed, every_turn=False)
    seconds, turns = sum(run["scoring_seconds"]) + sum(run["train_seconds"]), sum(run["turns"])
    return {"grpo_passes_ms_per_turn": round(1000 * seconds / turns, 1), "grpo_passes_turns": int(turns),
            "grpo_attention": settings.attention, "grpo_scored_positions": settings.scored_positions,
            "grpo_bf16": settings.bf16, "grpo_last_loss": run["losses"][-1]}


def grpo_step(parts: dict[str, Any], passes_tokens_per_turn: float) -> dict[str, Any]:
    """A step's cost per turn, rollouts plus training passes, and its useful FLOP/s: each rollout token forward once,
    each trained token forward and backward (3 forwards) for the policy and forward for the reference."""
    shapes = student_shapes()
    rollout_tokens, ms = parts["grpo_rollout_tokens_per_turn"], parts["grpo_rollout_ms_per_turn"]
    flops = rollout_tokens * forward_flops_per_token(shapes, rollout_tokens / 2) \
        + 4 * passes_tokens_per_turn * forward_flops_per_token(shapes, passes_tokens_per_turn / 2)
    per_turn = ms + parts["grpo_passes_ms_per_turn"]
    return {"grpo_ms_per_turn": round(per_turn, 1), "grpo_gflops_per_second": round(flops / per_turn / 1e6, 2)}


def sft_arm(dataset: str, steps: int, overrides: list[str]) -> dict[str, Any]:
    """The ``small`` recipe's SFT with ``overrides`` for ``steps`` steps in this process: non-padding input tokens/s
    (the recipe's measure) and the achieved GFLOP/s."""
    settings, result, rate = timed_sft(dataset, "small", steps, overrides)
    tokens = (result.tokens_seen or 0) / max(1, result.steps * settings.batch_size)  # a mean example's length
    return {"sft_tokens_per_second": rate, "sft_steps": result.steps, "sft_attention": settings.attention,
            "sft_scored_positions": settings.scored_positions,
            "sft_bf16": settings.bf16, "sft_padding_free": settings.padding_free, "sft_last_loss": result.train_loss,
            "sft_gflops_per_second": round(3 * rate * forward_flops_per_token(student_shapes(), tokens / 2) / 1e9, 2)}


def grpo_part(model: str, games: int, steps: int, repeats: int) -> dict[str, Any]:
    """Both GRPO arms, alternating ``repeats`` times (each part's best run counts): the rollouts through the batch
    engine against the continuous one (their greedy turns compared), and the training passes as found against
    today's on the same recorded turns; ``before`` and ``after`` hold each arm's composed step."""
    import torch
    from training_passes import recorded_turns

    from evoharness.training.recipes import load_recipe

    torch.set_num_threads(1)
    recipe = load_recipe("small").grpo
    group = recipe.num_generations
    if games // group < recipe.games_per_step:
        raise SystemExit(f"--grpo-games {games}: a training step takes {recipe.games_per_step} recorded games of "
                         f"{group} episodes each, so at least {recipe.games_per_step * group}")
    fixed = recorded_turns(model, games // group, group)
    arms: dict[str, tuple[Engine, dict[str, str]]] = {"before": ("batch", PASSES_BEFORE), "after": ("continuous", {})}
    runs: dict[str, list[dict[str, Any]]] = {arm: [] for arm in arms}
    for _ in range(repeats):
        for arm, (engine, passes) in arms.items():
            runs[arm].append(grpo_rollouts(model, engine, games) | grpo_passes(model, passes, fixed, steps))
            print("grpo", arm, {k: v for k, v in runs[arm][-1].items() if k[0] != "_"}, flush=True)
    tokens = [len(t.prompt_ids) + len(t.completion_ids) for r in fixed.episodes.values() for t in r.turns]
    best: dict[str, dict[str, Any]] = {}
    for arm, results in runs.items():
        rollout = min(results, key=lambda r: r["grpo_rollout_ms_per_turn"])
        passes = min(results, key=lambda r: r["grpo_passes_ms_per_turn"])
        best[arm] = {k: v for k, v in rollout.items() if k.startswith("grpo_rollout")} | \
            {k: v for k, v in passes.items() if not k.startswith("grpo_rollout") and k[0] != "_"}
        best[arm] |= grpo_step(best[arm], sum(tokens) / len(tokens))
    identical = [sum(x == y for x, y in zip(b["_texts"], a["_texts"], strict=False))
                 for b, a in zip(runs["before"], runs["after"], strict=True)]
    return {"before": best["before"], "after": best["after"], "recorded_turns": fixed.turns,
            "rollout_turns_identical_per_repeat": identical,
            "runs": {arm: [{k: v for k, v in r.items() if k[0] != "_"} for r in results]
                     for arm, results in runs.items()}}


PASSES_BEFORE = {"attention": "sdpa", "scored_positions": "all"}
"""The training passes' settings as issue #28 found them (today's: the recipe's)."""
SFT_ARMS = {"before": [f"sft.{k}={v}" for k, v in PASSES_BEFORE.items()], "after": [],
            "packed": ["sft.padding_free=true"]}


def fractions(measured: dict[str, Any], roofline: dict[str, Any]) -> dict[str, float]:
    """Each stage's achieved FLOP/s over the fp32 and bf16 rooflines at the prefill/training shape, on as many
    threads as the stage's processes had (one each)."""
    out = {}
    for stage in ("eval", "grpo", "sft"):
        if f"{stage}_gflops_per_second" in measured:
            threads = measured.get(f"{stage}_processes", 1)
            for precision in ("fp32", "bf16"):
                peak = roofline["roofline"][f"{precision}_{threads}t"]["rows_4096"]
                out[f"{stage}_of_{precision}"] = round(measured[f"{stage}_gflops_per_second"] / peak, 3)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", required=True, help="A trained small student folder (its model and card).")
    parser.add_argument("--dataset", help="A curated SFT dataset folder (evoharness curate); none: no SFT.")
    parser.add_argument("--games", type=int, default=8, help="First N games of each held-out split (0: all 274).")
    parser.add_argument("--max-steps", type=int, default=70, help="Episode step budget.")
    parser.add_argument("--sweep", type=int, nargs="*", default=[], help="Episodes in flight to try for 'after' "
                        "(on --sweep-games games per split); the fastest is used. None: --in-flight.")
    parser.add_argument("--sweep-games", type=int, default=4)
    parser.add_argument("--in-flight", type=int, default=32)
    parser.add_argument("--sft-steps", type=int, default=40, help="Per SFT arm (the rate is taken from step 10 on).")
    parser.add_argument("--sft-repeats", type=int, default=2, help="Runs of each SFT arm, alternating; the best "
                        "counts.")
    parser.add_argument("--grpo-games", type=int, default=16, help="Train games played by each rollouts arm (one "
                        "episode each), and recorded for the passes (a group each).")
    parser.add_argument("--grpo-steps", type=int, default=2, help="GRPO steps per training-passes arm.")
    parser.add_argument("--grpo-repeats", type=int, default=2, help="Runs of each GRPO arm, alternating; the best "
                        "counts.")
    parser.add_argument("--skip", nargs="*", default=[], choices=["eval", "grpo", "sft"])
    parser.add_argument("--roofline", type=Path, default=ROOFLINE, help="This machine's benchmarks/roofline.py result.")
    parser.add_argument("--output", type=Path, default=RESULTS)
    parser.add_argument("--sft-arm", choices=list(SFT_ARMS), help=argparse.SUPPRESS)  # one SFT arm, print its JSON
    args = parser.parse_args()
    if args.sft_arm:
        print(json.dumps(sft_arm(args.dataset, args.sft_steps, SFT_ARMS[args.sft_arm])))
        return
    logging.getLogger("evoharness.teachers.llm").setLevel(logging.ERROR)
    games = args.games or None
    before: dict[str, Any] = {}
    after: dict[str, Any] = {}
    report: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        if "eval" not in args.skip:
            in_flight, sweep = args.in_flight, {}
            for candidate in args.sweep:
                measured = evaluation(args.model, "continuous", candidate, args.sweep_games,
                                      root / f"sweep{candidate}", args.max_steps)
                sweep[candidate] = measured["eval_turns_per_second"]
                print("sweep", candidate, sweep[candidate], flush=True)
            if sweep:
                in_flight = max(sweep, key=sweep.__getitem__)
                report["in_flight_sweep_turns_per_second"] = sweep
            before |= evaluation(args.model, "batch", BEFORE_IN_FLIGHT, games, root / "eval_before", args.max_steps)
            print("before", {k: v for k, v in before.items() if k[0] != "_"}, flush=True)
            processes = local_processes(args.model, games, in_flight)  # as evoharness evaluate plays
            after |= evaluation(args.model, "continuous", in_flight, games, root / "eval_after", args.max_steps,
                                processes)
            print("after", {k: v for k, v in after.items() if k[0] != "_"}, flush=True)
            report["decisions"] = same_decisions(before.pop("_decisions"), after.pop("_decisions"))
            print("decisions", report["decisions"], flush=True)
        if "grpo" not in args.skip:
            report["grpo"] = grpo_part(args.model, args.grpo_games, args.grpo_steps, args.grpo_repeats)
            before |= report["grpo"].pop("before")
            after |= report["grpo"].pop("after")
    if args.dataset and "sft" not in args.skip:
        runs = arms_in_processes(__file__, ["--model", args.model, "--dataset", args.dataset, "--sft-steps",
                                            str(args.sft_steps)], "--sft-arm", list(SFT_ARMS), args.sft_repeats)
        for run, name in zip(runs, list(SFT_ARMS) * args.sft_repeats, strict=True):
            run["arm"] = name
        report["sft_runs"] = runs
        arms = {name: {k: v for k, v in max((r for r in runs if r["arm"] == name),
                                            key=lambda r: r["sft_tokens_per_second"]).items()
                       if k not in ("repeat", "arm")} for name in SFT_ARMS}  # each arm's best run
        before |= arms["before"]
        after |= arms["after"]
        packed = arms["packed"]
        report["sft_packed_alternative"] = packed | {
            "ratio_to_padded": round(packed["sft_tokens_per_second"] / after["sft_tokens_per_second"], 2)}
    ratio = {}
    for key, value in before.items():
        speed = not isinstance(value, bool) and not key.endswith("loss")  # flags and losses are not speeds
        if speed and isinstance(value, int | float) and value and isinstance(after.get(key), int | float):
            lower_is_better = key.endswith(("seconds", "ms_per_turn"))
            ratio[key] = round(value / after[key] if lower_is_better else after[key] / value, 2)
    roofline = json.loads(args.roofline.read_text())  # read last: benchmarks/roofline.py may run alongside
    report = {
        "benchmark": "student_speed", "before": before, "after": after, "ratio": ratio,
        "roofline": {"before": fractions(before, roofline), "after": fractions(after, roofline),
                     "gflops_fp32_1t": roofline["roofline"]["fp32_1t"], "gflops_bf16_1t": roofline["roofline"]["bf16_1t"]},
        "command": "OMP_NUM_THREADS=1 " + command_line(), "games_per_split": games, "model": args.model,
        "dataset": args.dataset, "roofline_file": args.roofline.name, **report,
        "note": "before/after ratios come from one run (OMP_NUM_THREADS=1); absolute figures hold for a machine as "
                "quiet as machine.load_average_1_5_15_min says",
    }
    write_report(args.output, report)
    print(json.dumps({"ratio": ratio, "roofline": report["roofline"]}, indent=1))
    print(f"wrote {args.output}")


if __name__ == "__main__":
    main()
