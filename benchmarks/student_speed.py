"""Today's student path against the new one, side by side in one run: evaluation, a GRPO step and SFT, each also as a
fraction of the machine's roofline (``benchmarks/results/roofline.json``; run ``benchmarks/roofline.py`` first).

    OMP_NUM_THREADS=1 ALFWORLD_DATA=../shared/alfworld python benchmarks/student_speed.py \\
        --model MODEL_DIR --dataset DATASET_DIR [--games N] [--sweep 16 32 64]

* ``before``: generation by left-padded ``generate`` batches (``BatchGenerator(engine="batch")``), 16 episodes in
  flight.
* ``after``: one continuous batch over a slot key/value cache (``engine="continuous"``: refill at once, shared
  prompt prefix reused, the constraint as a precomputed mask), the episodes in flight chosen by ``--sweep``.
* SFT, the same on both sides: training steps (forward, backward, AdamW) on padded batches of 16 grouped by length,
  as the ``small`` recipe trains, timed outside ``train_sft`` (its end-of-training evaluation would be timed with
  it). The same batches packed into one sequence (TRL's ``padding_free``: position ids restart per example) are
  measured beside it as ``sft_packed_alternative``: on CPU, SDPA then attends over the whole packed sequence with a
  block mask, which costs more than the little padding that grouping by length leaves.

Evaluation plays the first ``--games`` games of each held-out split (all 274 with ``--games 0``) greedily; both paths
must take the same decisions: every stored turn's text is compared (``decisions``). The GRPO step is one step of
4 games x 4 episodes of the ``small`` recipe. FLOPs count useful work only (``roofline.forward_flops_per_token``):
evaluation, prompt and completion tokens once forward; GRPO, the rollouts' forward plus 3 forward passes (forward
and backward) of the policy and one of the reference per turn token; SFT, 3 forward passes per non-padding token.
Writes ``benchmarks/results/student_speed.json``.
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

from evoharness.collection import CollectionConfig, collect
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
               max_steps: int = 70) -> dict[str, Any]:
    """Greedy evaluation of ``model`` on the held-out splits through ``engine``: wall seconds, turns/s, tokens."""
    spec = TeacherSpec(name="student", provider=Provider.LOCAL_HF, model=model, price_in=0.0, price_out=0.0,
                       max_concurrency=in_flight, max_tokens=128, distill_games=None, mode=Mode.BPE,
                       prompt_template=student_prompt_set(model, Mode.BPE), constrain_actions=True)
    LocalHFClient.default_engine = engine
    folder.mkdir(parents=True, exist_ok=True)
    with Warehouse(folder / "eval.duckdb") as wh:
        started = time.perf_counter()
        for split in SPLITS:
            config = CollectionConfig(teacher="student", split=split, limit=games, max_steps=max_steps,
                                      concurrency=in_flight, engine="fast", preflight=False)
            collect(config, wh, f"speed-{split}", registry=TeacherRegistry([spec]))
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


def grpo_step(model: str, engine: Engine, folder: Path, episode_steps: int | None) -> dict[str, Any]:
    """One GRPO step of the ``small`` recipe (4 games x 4 episodes) with rollouts generated by ``engine``
    (``episode_steps``: a shorter step budget than the recipe's, None: the recipe's)."""
    from evoharness.training.grpo import rollout_engine, train_grpo
    from evoharness.training.recipes import load_recipe
    from evoharness.training.rollout import Rollout

    recipe = load_recipe("small").grpo
    settings = recipe.model_copy(update={"max_steps": 1, "save_steps": None,
                                         "episode_steps": episode_steps or recipe.episode_steps})
    rollouts = rollout_engine(settings, None, None, "fast", student_prompt_set(model, Mode.BPE))
    rollouts.generation = engine
    played: list[Rollout] = []
    play = rollouts.play

    def counting_play(*args: Any, **kwargs: Any) -> list[Rollout]:
        started = time.perf_counter()
        result = play(*args, **kwargs)
        counting_play.seconds += time.perf_counter() - started  # type: ignore[attr-defined]
        played.extend(result)
        return result

    counting_play.seconds = 0.0  # type: ignore[attr-defined]
    rollouts.play = counting_play  # type: ignore[method-assign]
    result = train_grpo(model, folder, settings, rollouts=rollouts, engine="fast")
    turns = [t for r in played for t in r.turns]
    shapes = student_shapes()
    prompt = sum(len(t.prompt_ids) for t in turns)
    completion = sum(len(t.completion_ids) for t in turns)
    mean = (prompt + completion) / max(1, len(turns))
    flops = (prompt + completion) * forward_flops_per_token(shapes, mean / 2) * (1 + 3 + 1)
    seconds = result.seconds / max(1, result.steps)
    return {"grpo_seconds_per_step": round(seconds, 1),
            "grpo_rollout_seconds": round(counting_play.seconds, 1),  # type: ignore[attr-defined]
            "grpo_turns": len(turns), "grpo_gflops_per_second": round(flops / result.seconds / 1e9, 2)}


def sft_batches(dataset: str, model: str, steps: int, batch_size: int = 16, seed: int = 0) -> list[list[list[int]]]:
    """``steps`` batches of ``batch_size`` examples of the dataset's train split in the ``small`` recipe's
    rendering (prompt and completion token ids), grouped by length as ``group_by_length`` does."""
    import random

    from transformers import AutoTokenizer

    from evoharness.training.recipes import load_recipe
    from evoharness.training.sft import prepare_splits

    settings = load_recipe("small").sft
    train, _ = prepare_splits(dataset, settings.prompt_set, settings.view)
    tokenizer = AutoTokenizer.from_pretrained(model)
    rng = random.Random(seed)
    rows: list[Any] = [train[i] for i in rng.sample(range(len(train)), min(len(train), 4 * steps * batch_size))]
    template: Any = tokenizer.apply_chat_template
    examples: list[list[int]] = sorted(
        (list(template(r["prompt"] + r["completion"], tokenize=True, return_dict=True)["input_ids"]) for r in rows),
        key=len)
    groups = [examples[i:i + batch_size] for i in range(0, len(examples) - batch_size + 1, batch_size)]
    return rng.sample(groups, min(steps, len(groups)))


def sft_speed(model: str, batches: list[list[list[int]]], packed: bool) -> dict[str, Any]:
    """Non-padding tokens/s of full fine-tuning steps (forward, backward, AdamW) of ``model`` in fp32 on
    ``batches`` (the first is a warm-up): padded to the batch's longest example, or packed into one sequence whose
    position ids restart per example (attention stays per example, as with TRL's ``padding_free``)."""
    import torch
    from transformers import AutoModelForCausalLM

    net = AutoModelForCausalLM.from_pretrained(model).train()
    optimizer = torch.optim.AdamW(net.parameters(), lr=1e-4)
    pad = 0
    tokens, seconds = 0, 0.0
    for index, batch in enumerate(batches):
        started = time.perf_counter()
        if packed:
            ids = torch.tensor([[t for example in batch for t in example]])
            positions = torch.tensor([[p for example in batch for p in range(len(example))]])
            labels = ids.clone()
            starts = torch.tensor([0, *torch.tensor([len(e) for e in batch]).cumsum(0)[:-1].tolist()])
            labels[0, starts] = -100  # no example predicts the next one's first token
            loss = net(input_ids=ids, position_ids=positions, labels=labels, use_cache=False).loss
        else:
            width = max(len(e) for e in batch)
            ids = torch.tensor([e + [pad] * (width - len(e)) for e in batch])
            mask = torch.tensor([[1] * len(e) + [0] * (width - len(e)) for e in batch])
            labels = ids.masked_fill(mask == 0, -100)
            loss = net(input_ids=ids, attention_mask=mask, labels=labels, use_cache=False).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        if index:
            seconds += time.perf_counter() - started
            tokens += sum(len(e) for e in batch)
    rate = tokens / seconds
    mean = tokens / max(1, sum(len(b) for b in batches[1:]))
    return {"sft_tokens_per_second": round(rate, 1), "sft_steps": len(batches) - 1, "sft_packed": packed,
            "sft_gflops_per_second": round(3 * rate * forward_flops_per_token(student_shapes(), mean / 2) / 1e9, 2)}


def fractions(measured: dict[str, Any], roofline: dict[str, Any]) -> dict[str, float]:
    """Each stage's achieved FLOP/s over the 1-thread fp32 and bf16 rooflines at the prefill/training shape."""
    fp32, bf16 = roofline["roofline"]["fp32_1t"]["rows_4096"], roofline["roofline"]["bf16_1t"]["rows_4096"]
    out = {}
    for stage in ("eval", "grpo", "sft"):
        if f"{stage}_gflops_per_second" in measured:
            out[f"{stage}_of_fp32"] = round(measured[f"{stage}_gflops_per_second"] / fp32, 3)
            out[f"{stage}_of_bf16"] = round(measured[f"{stage}_gflops_per_second"] / bf16, 3)
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
    parser.add_argument("--sft-steps", type=int, default=6)
    parser.add_argument("--grpo-episode-steps", type=int, default=None, help="None: the recipe's (70).")
    parser.add_argument("--skip", nargs="*", default=[], choices=["eval", "grpo", "sft"])
    parser.add_argument("--output", type=Path, default=RESULTS)
    args = parser.parse_args()
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
            after |= evaluation(args.model, "continuous", in_flight, games, root / "eval_after", args.max_steps)
            print("after", {k: v for k, v in after.items() if k[0] != "_"}, flush=True)
            report["decisions"] = same_decisions(before.pop("_decisions"), after.pop("_decisions"))
            print("decisions", report["decisions"], flush=True)
        if "grpo" not in args.skip:
            before |= grpo_step(args.model, "batch", root / "grpo_before", args.grpo_episode_steps)
            after |= grpo_step(args.model, "continuous", root / "grpo_after", args.grpo_episode_steps)
            print("grpo", before.get("grpo_seconds_per_step"), after.get("grpo_seconds_per_step"), flush=True)
        if args.dataset and "sft" not in args.skip:
            batches = sft_batches(args.dataset, args.model, args.sft_steps + 1)
            padded = sft_speed(args.model, batches, packed=False)
            before |= padded  # the recipe's path, unchanged: measured once, reported on both sides
            after |= padded
            packed = sft_speed(args.model, batches, packed=True)
            report["sft_packed_alternative"] = packed | {
                "ratio_to_padded": round(packed["sft_tokens_per_second"] / padded["sft_tokens_per_second"], 2)}
            print("sft padded", padded["sft_tokens_per_second"], "packed", packed["sft_tokens_per_second"], flush=True)
    ratio = {}
    for key, value in before.items():
        if isinstance(value, int | float) and value and isinstance(after.get(key), int | float):
            lower_is_better = key.endswith(("seconds", "seconds_per_step"))
            ratio[key] = round(value / after[key] if lower_is_better else after[key] / value, 2)
    roofline = json.loads(ROOFLINE.read_text())  # read last: benchmarks/roofline.py may run alongside
    report = {
        "benchmark": "student_speed", "before": before, "after": after, "ratio": ratio,
        "roofline": {"before": fractions(before, roofline), "after": fractions(after, roofline),
                     "gflops_fp32_1t": roofline["roofline"]["fp32_1t"], "gflops_bf16_1t": roofline["roofline"]["bf16_1t"]},
        "command": "OMP_NUM_THREADS=1 " + command_line(), "games_per_split": games, "model": args.model,
        "dataset": args.dataset, **report,
        "note": "before/after ratios come from one run (OMP_NUM_THREADS=1); absolute figures hold for a machine as "
                "quiet as machine.load_average_1_5_15_min says",
    }
    write_report(args.output, report)
    print(json.dumps({"ratio": ratio, "roofline": report["roofline"]}, indent=1))
    print(f"wrote {args.output}")


if __name__ == "__main__":
    main()
