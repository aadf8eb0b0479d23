"""A served student's throughput: ``transformers serve`` with and without continuous batching, and the engine
server, side by side in one run, answering the same student turns (rendered as the recipe's SFT saw them) through
the real ``openai`` SDK at 1 and at N requests in flight, and each server with each of ``--threads`` torch threads.
Greedy completions must match across the servers (free decoding: no grammar is sent). Writes
``benchmarks/results/serve_throughput.json`` (or ``--out``); it chose ``ServeSettings.continuous_batching``.

    python benchmarks/serve_throughput.py --model MODEL_DIR --dataset DATASET_DIR [--turns 64 --in-flight 1 16]
        [--servers plain continuous_batching engine] [--threads 1 2] [--out NAME.json]
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

SERVERS: dict[str, dict[str, Any]] = {"plain": {"server": "transformers", "continuous_batching": False},
                                      "continuous_batching": {"server": "transformers", "continuous_batching": True},
                                      "engine": {"server": "evoharness"}}
"""A server by name: its settings."""


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
    parser.add_argument("--servers", nargs="+", choices=list(SERVERS), default=list(SERVERS))
    parser.add_argument("--threads", type=int, nargs="+", default=[None],
                        help="the server's torch threads, one server each (default: this shell's OMP_NUM_THREADS)")
    parser.add_argument("--out", default="serve_throughput.json", help="the results file in benchmarks/results")
    args = parser.parse_args()
    sft = load_recipe(args.recipe).sft
    train, _ = prepare_splits(args.dataset, sft.prompt_set, sft.view)
    turns = [row["prompt"] for row in train.select(range(args.turns))]
    servers: dict[str, Any] = {}
    completions: dict[str, list[str]] = {}
    for server in args.servers:
        for threads in args.threads:
            name = server if threads is None else f"{server}@{threads}threads"
            settings = ServeSettings(threads=threads, **SERVERS[server])
            with ServedModel(args.model, settings) as served:
                runs = []
                for in_flight in args.in_flight:
                    timing, completions[f"{name}@{in_flight}"] = play(served, turns, in_flight, args.max_tokens)
                    runs.append(timing)
                    print(name, timing, flush=True)
            servers.setdefault(name, []).extend(runs)  # a repeated --threads value adds its runs
    first = next(iter(completions))
    identical = {key: sum(a == b for a, b in zip(completions[first], texts, strict=True))
                 for key, texts in completions.items()}
    best = {(name, n): max(r["requests_per_second"] for r in runs if r["in_flight"] == n)
            for name, runs in servers.items() for n in args.in_flight}
    base = next(iter(servers))
    ratio = {f"{name}@{n}": round(rps / best[base, n], 2) for (name, n), rps in best.items()}
    result = {"model": args.model, "turns": len(turns), "max_tokens": args.max_tokens, "servers": servers,
              "requests_per_second_over_first_server": ratio, f"greedy_completions_identical_to_{first}": identical,
              "note": "2 CPU cores, OMP_NUM_THREADS as set by the caller unless --threads; ratios of each server's best "
                      "run, all from one run of this command"}
    report.write_report(report.RESULTS / args.out, result)
    print(result)


if __name__ == "__main__":
    main()
