"""GPU-hours and memory of the paper's Qwen3-8B run, from turn lengths measured in a warehouse.

    python benchmarks/gpu_estimate.py                                  # expert BPE episodes on 100 train games
    python benchmarks/gpu_estimate.py --db W.duckdb --teacher T        # an existing warehouse's episodes
    python benchmarks/gpu_estimate.py --tokenizer Qwen/Qwen3-8B        # exact Qwen3 token counts (needs the hub)

Measures turns per episode and characters per turn with warehouse/queries/turn_lengths.sql, and tokens per turn
by tokenizing the stored prompts and answers: with ``--tokenizer`` exactly; otherwise with a 4,096-entry
byte-level BPE trained on the same text, which splits text into *more* tokens than Qwen3's 151,646-entry
vocabulary does, so every estimate below is an upper bound. The formulas and constants are in
docs/gpu_estimate.md. Writes benchmarks/results/gpu_estimate.json.
"""

from __future__ import annotations

import argparse
import os
import tempfile
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
os.environ.setdefault("ALFWORLD_DATA", str(REPO.parent / "shared" / "alfworld"))

from report import RESULTS, write_report

OUTPUT = RESULTS / "gpu_estimate.json"
COMMAND = "python benchmarks/gpu_estimate.py"

# Qwen3-8B (config.json of the hub model): 36 layers, hidden 4096, 151,936-entry output vocabulary.
PARAMS, LAYERS, HIDDEN, VOCAB = 8.19e9, 36, 4096, 151_936
PEAK_BF16, MFU, HBM_BYTES_PER_S = 989e12, 0.40, 4.8e12  # H100/H200 dense bf16 peak; assumed utilization; H200 HBM
LORA_PARAMS = 175e6  # r 64 on every linear layer of Qwen3-8B: 36 × 64 × (sum of in+out of q,k,v,o,gate,up,down)
# the paper's runs (docs/DESIGN.md): SFT 1,153 turns × 4 epochs; GRPO 16 games × 8 episodes per step
SFT_TURNS, SFT_EPOCHS, EPISODES_PER_STEP, TRAIN_GAMES, GRPO_EPOCHS, MAX_NEW_TOKENS = 1153, 4, 128, 900, 150, 512


def measure(db: Path, teacher: str, mode: str, tokenizer_name: str | None) -> dict:
    from warehouse import Warehouse

    with Warehouse(db) as wh:
        columns, rows = wh.query("turn_lengths", teacher=teacher, mode=mode)
        texts = wh.con.execute("SELECT s.prompt, s.raw_output FROM steps s JOIN episodes e USING (episode_id) "
                               "WHERE e.teacher = ? AND e.mode = ? AND e.status = 'finished'",
                               [teacher, mode]).fetchall()
    measured = dict(zip(columns, rows[0], strict=True))
    if not measured["episodes"]:
        raise SystemExit(f"no finished {mode} episodes of {teacher!r} in {db}")
    encode, how = tokenizer(tokenizer_name, [t for pair in texts for t in pair])
    prompts = [len(encode(p)) for p, _ in texts]
    answers = [len(encode(a)) for _, a in texts]
    return measured | {"tokenizer": how, "prompt_tokens_per_turn": sum(prompts) / len(prompts),
                       "output_tokens_per_turn": sum(answers) / len(answers), "turns_measured": len(texts)}


def tokenizer(name: str | None, corpus: list[str]):  # type: ignore[no-untyped-def]
    if name:
        from transformers import AutoTokenizer

        loaded = AutoTokenizer.from_pretrained(name)
        return (lambda text: loaded(text, add_special_tokens=False)["input_ids"]), f"{name} (exact)"
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers

    core = Tokenizer(models.BPE())
    core.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    core.train_from_iterator(corpus, trainers.BpeTrainer(vocab_size=4096, show_progress=False,
                                                         initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    return (lambda text: core.encode(text).ids), "byte-level BPE, 4,096 entries, trained on these turns (upper bound)"


def estimate(m: dict) -> dict:
    """Compute and memory from the measured turn (formulas in docs/gpu_estimate.md)."""
    prompt, answer, turns = m["prompt_tokens_per_turn"], m["output_tokens_per_turn"], m["turns_per_episode"]
    tokens_per_turn = prompt + answer
    rate = PEAK_BF16 * MFU
    # SFT (LoRA): forward 2N + backward through the frozen base for activations 2N (+ tiny LoRA grads) per token
    sft_tokens = SFT_TURNS * SFT_EPOCHS * tokens_per_turn
    sft_gpu_hours = 4 * PARAMS * sft_tokens / rate / 3600
    # GRPO step: every turn prefilled and decoded once (vLLM), trained once (6N), scored by the reference (2N)
    turns_per_step = EPISODES_PER_STEP * turns
    step_tokens = turns_per_step * tokens_per_turn
    train_s = 8 * PARAMS * step_tokens / rate
    prefill_s = 2 * PARAMS * turns_per_step * prompt / rate
    # decoding is bound by reading the weights: all 128 episodes decode together, turn after turn
    decode_s = turns * answer * (2 * PARAMS / HBM_BYTES_PER_S)
    decode_cap_s = turns * MAX_NEW_TOKENS * (2 * PARAMS / HBM_BYTES_PER_S)
    step_gpu_s = train_s + prefill_s + decode_s
    steps_full = GRPO_EPOCHS * TRAIN_GAMES / 16
    # memory: full fine-tuning with AdamW in mixed precision = 16 bytes/parameter, + a bf16 reference copy
    grpo_state_gb = 16 * PARAMS / 1e9 + 2 * PARAMS / 1e9
    micro_tokens = 8 * (prompt + MAX_NEW_TOKENS)
    activations_gb = 34 * HIDDEN * LAYERS * micro_tokens / 1e9  # per micro-batch of 8 turns, no checkpointing
    logits_gb = 4 * VOCAB * micro_tokens / 1e9  # fp32 logits of a micro-batch if the LM head is not fused
    return {
        "tokens_per_turn": tokens_per_turn,
        "sft": {"tokens": sft_tokens, "gpu_hours": sft_gpu_hours,
                "memory_gb_one_gpu": 2 * PARAMS / 1e9 + 16 * LORA_PARAMS / 1e9 + activations_gb / 2},
        "grpo_step": {"turn_samples": turns_per_step, "tokens": step_tokens, "train_gpu_s": train_s,
                      "prefill_gpu_s": prefill_s, "decode_s_measured_length": decode_s,
                      "decode_s_if_every_turn_hit_512": decode_cap_s, "gpu_s": step_gpu_s},
        "grpo_runs": {f"{n} steps": {"gpu_hours": n * step_gpu_s / 3600} for n in (150, int(steps_full))},
        "grpo_memory_gb": {"weights_grads_adam_reference": grpo_state_gb,
                           "per_gpu_zero3_8_gpus": grpo_state_gb / 8, "activations_per_micro_batch_8": activations_gb,
                           "logits_per_micro_batch_8_unfused": logits_gb},
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db", type=Path, help="A warehouse with the episodes [default: collect the expert].")
    parser.add_argument("--teacher", default="expert")
    parser.add_argument("--mode", default="bpe")
    parser.add_argument("--games", type=int, default=100, help="Train games the expert plays (without --db).")
    parser.add_argument("--tokenizer", help="A tokenizer to count with exactly, e.g. Qwen/Qwen3-8B.")
    parser.add_argument("--output", type=Path, default=OUTPUT)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        db = args.db
        if db is None:
            from evoharness.collection import CollectionConfig, collect
            from evoharness.harness.prompts import Mode
            from warehouse import Warehouse

            db = Path(tmp) / "estimate.duckdb"
            with Warehouse(db) as wh:
                collect(CollectionConfig(mode=Mode(args.mode), split="train", limit=args.games, workers=0,
                                         engine="fast"), wh, run_id="gpu-estimate")
        measured = measure(db, args.teacher, args.mode, args.tokenizer)
    result: dict[str, Any] = {"command": COMMAND + (f" --tokenizer {args.tokenizer}" if args.tokenizer else ""),
              "measured": measured, "estimate": estimate(measured),
              "constants": {"params": PARAMS, "peak_bf16_flops": PEAK_BF16, "mfu": MFU, "hbm_bytes_per_s":
                            HBM_BYTES_PER_S, "lora_params": LORA_PARAMS, "train_games": TRAIN_GAMES}}
    write_report(args.output, result, indent=1)
    e = result["estimate"]
    print(f"measured on {measured['episodes']} episodes ({measured['turns_measured']} turns): "
          f"{measured['turns_per_episode']:.1f} turns/episode, {measured['prompt_tokens_per_turn']:.0f} prompt + "
          f"{measured['output_tokens_per_turn']:.0f} answer tokens/turn [{measured['tokenizer']}]")
    print(f"SFT (LoRA, {SFT_TURNS} turns × {SFT_EPOCHS} epochs): {e['sft']['gpu_hours']:.2f} GPU-hours, "
          f"~{e['sft']['memory_gb_one_gpu']:.0f} GB on one GPU")
    step = e["grpo_step"]
    print(f"GRPO step: {step['turn_samples']:.0f} turn samples, {step['tokens'] / 1e6:.2f} M tokens, "
          f"train {step['train_gpu_s']:.0f} GPU-s + prefill {step['prefill_gpu_s']:.0f} GPU-s + decode "
          f"{step['decode_s_measured_length']:.0f} s (≤{step['decode_s_if_every_turn_hit_512']:.0f} s at 512 "
          "tokens/turn)")
    for name, run in e["grpo_runs"].items():
        print(f"GRPO {name}: {run['gpu_hours']:.0f} GPU-hours")
    mem = e["grpo_memory_gb"]
    print(f"GRPO memory: {mem['weights_grads_adam_reference']:.0f} GB of state ({mem['per_gpu_zero3_8_gpus']:.0f} "
          f"GB/GPU under ZeRO-3 on 8) + {mem['activations_per_micro_batch_8']:.0f} GB activations per micro-batch "
          f"of 8 turns; wrote {args.output}")


if __name__ == "__main__":
    main()
