"""A served student's throughput: ``transformers serve`` with and without continuous batching, side by side in one
run, answering the same student turns (rendered as the recipe's SFT saw them) through the real ``openai`` SDK at
1 and at N requests in flight. Greedy completions must match across the two servers. Writes
``benchmarks/results/serve_throughput.json``; it chose ``ServeSettings.continuous_batching``.

    python benchmarks/serve_throughput.py --model MODEL_DIR --dataset DATASET_DIR [--turns 64 --in-flight 1 16]
"""

from __future__ import annotations

import argparse
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import report

from evoharness.serving import ServedModel, ServeSettings
from evoharness.teachers.clients.openai_client import with_reasoning
from evoharness.training.recipes import DEFAULT_RECIPE, load_recipe
from evoharness.training.sft import prepare_splits


def play(served: ServedModel, turns: list[list[dict[str, str]]], in_flight: int,
         max_tokens: int) -> tuple[dict[str, Any], list[str]]:
    """Every turn answered greedily with ``in_flight`` requests at once; (timing, the completions in order)."""
    import openai

    client = openai.OpenAI(base_url=served.base_url, api_key="unused", max_retries=0, timeout=600)

    def answer(messages: list[dict[str, str]]) -> tuple[str, int]:
        reply = client.chat.completions.create(model=served.model, messages=messages,  # type: ignore[arg-type]
                                               max_tokens=max_tokens, temperature=0)
        return with_reasoning(reply.choices[0].message), reply.usage.completion_tokens if reply.usage else 0

    answer(turns[0])  # warm-up
    started = time.perf_counter()
    with ThreadPoolExecutor(in_flight) as pool:
        answers = list(pool.map(answer, turns))
    seconds = time.perf_counter() - started
    tokens = sum(count for _, count in answers)
    return ({"in_flight": in_flight, "seconds": round(seconds, 2), "requests_per_second": round(len(turns) / seconds, 2),
             "output_tokens_per_second": round(tokens / seconds, 1)}, [text for text, _ in answers])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", required=True, help="a trained student's model folder")
    parser.add_argument("--dataset", required=True, help="a curated dataset folder (its turns are the requests)")
    parser.add_argument("--recipe", default=DEFAULT_RECIPE, help="the prompt set the student trained in")
    parser.add_argument("--turns", type=int, default=64)
    parser.add_argument("--in-flight", type=int, nargs="+", default=[1, 16])
    parser.add_argument("--max-tokens", type=int, default=48)
    args = parser.parse_args()
    sft = load_recipe(args.recipe).sft
    train, _ = prepare_splits(args.dataset, sft.prompt_set, sft.view)
    turns = [row["prompt"] for row in train.select(range(args.turns))]
    servers: dict[str, Any] = {}
    completions: dict[str, list[str]] = {}
    for name, batching in (("plain", False), ("continuous_batching", True)):
        with ServedModel(args.model, ServeSettings(continuous_batching=batching)) as served:
            runs = []
            for in_flight in args.in_flight:
                timing, completions[f"{name}@{in_flight}"] = play(served, turns, in_flight, args.max_tokens)
                runs.append(timing)
                print(name, timing, flush=True)
        servers[name] = runs
    reference = completions[f"plain@{args.in_flight[0]}"]
    identical = {key: sum(a == b for a, b in zip(reference, texts, strict=True)) for key, texts in completions.items()}
    ratio = {str(n): round(servers["continuous_batching"][i]["requests_per_second"]
                           / servers["plain"][i]["requests_per_second"], 2) for i, n in enumerate(args.in_flight)}
    result = {"model": args.model, "turns": len(turns), "max_tokens": args.max_tokens, "servers": servers,
              "ratio_continuous_over_plain": ratio, "greedy_completions_identical_to_plain": identical,
              "note": "2 CPU cores, OMP_NUM_THREADS as set by the caller; ratios come from one run"}
    report.write_report(report.RESULTS / "serve_throughput.json", result)
    print(result)


if __name__ == "__main__":
    main()
