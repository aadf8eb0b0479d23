"""How much of an SFT batch is padding: a dataset's tokenized lengths batched as the Trainer batches them, with
``group_by_length`` (HF's length-grouped sampler, the recipes' setting) and in random order. What packing could
save is at most the padded share. Writes ``benchmarks/results/sft_padding.json``.

    python benchmarks/sft_padding.py --dataset .evoharness/datasets/sft-expert/v1 --tokenizer MODEL_DIR
"""

from __future__ import annotations

import argparse
import random
import statistics
from collections.abc import Sequence

import report

from evoharness.training.recipes import DEFAULT_RECIPE, load_recipe
from evoharness.training.sft import prepare_splits


def real_share(lengths: Sequence[int], order: Sequence[int], per_device: int) -> float:
    """Real tokens over the tokens of batches of ``per_device`` examples in ``order``, each padded to its longest."""
    real = padded = 0
    for start in range(0, len(order), per_device):
        batch = [lengths[i] for i in order[start:start + per_device]]
        real += sum(batch)
        padded += max(batch) * len(batch)
    return real / padded


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dataset", required=True, help="a curated dataset folder")
    parser.add_argument("--tokenizer", required=True, help="the student's model folder (its tokenizer)")
    parser.add_argument("--recipe", default=DEFAULT_RECIPE, help="prompt set, view, length cap and batch layout")
    parser.add_argument("--processes", type=int, default=2, help="training processes (the per-device batch)")
    args = parser.parse_args()
    import torch
    from transformers import AutoTokenizer
    from transformers.trainer_pt_utils import get_length_grouped_indices

    sft = load_recipe(args.recipe).sft
    per_device, _ = sft.batch_layout(args.processes)
    train, _ = prepare_splits(args.dataset, sft.prompt_set, sft.view)
    tokenizer = AutoTokenizer.from_pretrained(args.tokenizer)
    lengths = []
    for row in train:
        ids = tokenizer.apply_chat_template(row["prompt"] + row["completion"], tokenize=True, return_dict=True)
        lengths.append(min(len(ids["input_ids"]), sft.max_length))
    generator = torch.Generator().manual_seed(0)
    grouped = get_length_grouped_indices(lengths, per_device, generator=generator)
    shuffled = random.Random(0).sample(range(len(lengths)), len(lengths))
    result = {"recipe": args.recipe, "examples": len(lengths), "per_device_batch": per_device,
              "tokens_per_example": {"mean": round(statistics.mean(lengths), 1), "min": min(lengths),
                                     "max": max(lengths)},
              "real_token_share": {"group_by_length": round(real_share(lengths, grouped, per_device), 4),
                                   "random": round(real_share(lengths, shuffled, per_device), 4)}}
    report.write_report(report.RESULTS / "sft_padding.json", result)
    print(result)


if __name__ == "__main__":
    main()
