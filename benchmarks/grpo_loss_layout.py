"""A GRPO step's training passes (the reference log-probabilities, then the loss forward and backward in
micro-batches) on the same turn samples, laid out two ways side by side in one run:

- ``padded``: turns in episode order, the reference pass over the whole step padded to its longest turn (the
  layout before the samples were ordered);
- ``longest_first``: turns ordered longest first, every pass in the micro-batches' row chunks with their unused
  padding cut (``grpo_samples.longest_first``, ``EpisodeGRPOTrainer._chunked_logps``).

The turns are real: the ALFWorld expert plays ``--games`` train games ``--group`` times with different step budgets
(``fixed_rollouts``), tokenized by the student. The loss and the gradient must agree between the layouts (numerics
only). Writes ``benchmarks/results/grpo_loss_layout.json``.

    OMP_NUM_THREADS=1 python benchmarks/grpo_loss_layout.py --model MODEL_DIR
"""

from __future__ import annotations

import argparse
import tempfile
import time
from typing import Any

import report
import torch

from evoharness.envs.alfworld import GameCatalog
from evoharness.training.fixed_rollouts import record_expert_rollouts
from evoharness.training.grpo import build_grpo_trainer
from evoharness.training.grpo_samples import (
    episode_turns,
    longest_first,
    micro_batches,
    trimmed_chunks,
    turn_samples,
    whole_sequences,
)
from evoharness.training.recipes import DEFAULT_RECIPE, load_recipe


def computed_tokens(batch: dict[str, Any], size: int) -> int:
    """Token positions the passes compute over when ``batch`` is run in chunks of ``size`` with padding cut."""
    return sum(chunk["prompt_ids"].numel() + chunk["completion_ids"].numel() for _, chunk in trimmed_chunks(batch, size))


def passes(trainer: Any, batch: dict[str, Any], chunked: bool) -> dict[str, Any]:
    """The reference pass, then the loss's forward and backward over the micro-batches; timings, loss, gradient."""
    size = trainer.micro_batch_size
    trainer.model.zero_grad()
    started = time.perf_counter()
    with torch.no_grad():
        if chunked:
            batch["ref_per_token_logps"] = trainer._chunked_logps(batch, reference=True)
        else:
            batch["ref_per_token_logps"] = trainer._get_per_token_logps_and_entropies(
                trainer.ref_model, *whole_sequences(batch), batch["completion_ids"].size(1), batch_size=size)[0]
    reference = time.perf_counter() - started
    total = torch.zeros(())
    for chunk in micro_batches(batch, size, int(batch["micro_batches"]), trainer.loss_type):
        loss = trainer.compute_loss(trainer.model, chunk) * chunk["loss_weight"]
        loss.backward()
        total += loss.detach()
    seconds = time.perf_counter() - started
    gradient = torch.cat([p.grad.flatten() for p in trainer.model.parameters() if p.grad is not None])
    return {"reference_seconds": round(reference, 2), "loss_seconds": round(seconds - reference, 2),
            "seconds": round(seconds, 2), "loss": float(total), "gradient": gradient.clone()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", required=True, help="a trained student's model folder")
    parser.add_argument("--recipe", default=DEFAULT_RECIPE, help="its GRPO settings (micro-batch, loss, β)")
    parser.add_argument("--games", type=int, default=4)
    parser.add_argument("--group", type=int, default=4)
    parser.add_argument("--repeats", type=int, default=2)
    args = parser.parse_args()
    from transformers import AutoTokenizer

    games = [g.game_id for g in GameCatalog().games("train", args.games)]
    tokenizer = AutoTokenizer.from_pretrained(args.model)
    budgets = (70, 30, 15, 8)[:args.group]
    fixed = record_expert_rollouts(games, tokenizer, group=args.group, budgets=budgets, prompt_tokens=1024,
                                   completion_tokens=64)
    settings = load_recipe(args.recipe).grpo.model_copy(update={"save_steps": None, "games_limit": len(games)})
    with tempfile.TemporaryDirectory() as folder:
        trainer = build_grpo_trainer(args.model, folder, settings, fixed)
    trainer.model.train()
    trainer.current_gradient_accumulation_steps = trainer.args.gradient_accumulation_steps  # set by train()
    played = list(fixed.episodes.values())
    advantages = torch.linspace(-1.0, 1.0, len(played))
    padded = turn_samples(episode_turns(played, advantages), tokenizer.pad_token_id)
    turns = padded["prompt_ids"].size(0)
    padded |= {"global_turns": torch.tensor(turns), "micro_batches": torch.tensor(-(-turns // trainer.micro_batch_size))}
    layouts = {"padded": (padded, False), "longest_first": (longest_first(padded), True)}
    runs: dict[str, list[dict[str, Any]]] = {name: [] for name in layouts}
    for _ in range(args.repeats):  # alternating, so drift in the machine's load hits both
        for name, (batch, chunked) in layouts.items():
            runs[name].append(passes(trainer, dict(batch), chunked))
            print(name, {k: v for k, v in runs[name][-1].items() if k != "gradient"}, flush=True)
    real = int(padded["prompt_mask"].sum() + padded["completion_mask"].sum())
    best = {name: min(r["seconds"] for r in rs) for name, rs in runs.items()}
    first = {name: rs[0] for name, rs in runs.items()}
    gradients = [first[name]["gradient"] for name in layouts]
    result = {
        "model": args.model, "recipe": args.recipe, "games": len(games), "group": args.group, "budgets": budgets,
        "turns": turns, "micro_batch": trainer.micro_batch_size, "beta": trainer.beta, "real_tokens": real,
        "computed_tokens": {"padded": int(padded["prompt_ids"].numel() + padded["completion_ids"].numel()),
                            "padded_loss_passes": computed_tokens(padded, trainer.micro_batch_size),
                            "longest_first": computed_tokens(layouts["longest_first"][0], trainer.micro_batch_size)},
        "seconds": {name: [{k: v for k, v in r.items() if k.endswith("seconds")} for r in rs]
                    for name, rs in runs.items()},
        "speedup": round(best["padded"] / best["longest_first"], 2),
        "loss": {name: first[name]["loss"] for name in layouts},
        "gradient_max_abs_difference": float((gradients[0] - gradients[1]).abs().max()),
        "gradient_max_abs": float(gradients[0].abs().max()),
        "note": "one process, OMP_NUM_THREADS as set by the caller; the layouts alternate in one run",
    }
    report.write_report(report.RESULTS / "grpo_loss_layout.json", result)
    print({k: v for k, v in result.items() if k != "seconds"})


if __name__ == "__main__":
    main()
