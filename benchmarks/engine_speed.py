"""Time the real ALFWorld engine (textworld PddlEnv) and the fast engine side by side on the same 20 games.

Per game: load+reset (a fresh environment, the fast engine's parse cache cleared), then the same seeded
walk of admissible commands on both engines. Prints medians / p90 and ratios; writes
``benchmarks/results/engine_speed.json``.

    python benchmarks/engine_speed.py [--games 20] [--steps 25]
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import sys
import time
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")
REPO = Path(__file__).resolve().parents[1]
os.environ.setdefault("ALFWORLD_DATA", str(REPO.parent / "shared" / "alfworld"))

from report import RESULTS, write_report

from evoharness.envs.alfworld.catalog import GameCatalog, GameRecord
from evoharness.envs.alfworld.fast_engine import FastAlfworldEnv, load_world
from evoharness.envs.alfworld.textworld_engine import TextWorldAlfworldEnv


def pick_games(catalog: GameCatalog, count: int) -> list[GameRecord]:
    """``count`` games spread over the three splits (catalog order, so all task types appear)."""
    per_split, extra = divmod(count, 3)
    games: list[GameRecord] = []
    for i, split in enumerate(("valid_seen", "valid_unseen", "train")):
        games += catalog.games(split, limit=per_split + (1 if i < extra else 0))
    return games


def quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def time_engine(make, game: GameRecord, commands: list[str] | None, steps: int, seed: int):
    """(load+reset seconds, per-step seconds, the commands played)."""
    start = time.perf_counter()
    env = make(game)
    result = env.reset(seed)
    load = time.perf_counter() - start
    rng = random.Random(seed)
    played: list[str] = []
    step_times: list[float] = []
    for i in range(steps):
        command = commands[i] if commands is not None else rng.choice(result.admissible_commands)
        t0 = time.perf_counter()
        result = env.step(command)
        step_times.append(time.perf_counter() - t0)
        played.append(command)
    env.close()
    return load, step_times, played


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--games", type=int, default=20)
    parser.add_argument("--steps", type=int, default=25)
    parser.add_argument("--out", type=Path, default=RESULTS / "engine_speed.json")
    args = parser.parse_args()

    games = pick_games(GameCatalog(), args.games)
    rows = []
    fast_load, fast_step, real_load, real_step = [], [], [], []
    for n, game in enumerate(games):
        load_world.cache_clear()
        f_load, f_steps, commands = time_engine(FastAlfworldEnv, game, None, args.steps, seed=n)
        r_load, r_steps, _ = time_engine(TextWorldAlfworldEnv, game, commands, args.steps, seed=n)
        fast_load.append(f_load)
        real_load.append(r_load)
        fast_step += f_steps
        real_step += r_steps
        rows.append({"game_id": game.game_id, "fast_load_s": f_load, "real_load_s": r_load,
                     "fast_step_median_s": statistics.median(f_steps),
                     "real_step_median_s": statistics.median(r_steps)})
        print(f"[{n + 1}/{len(games)}] {game.game_id}: load {r_load * 1e3:.0f} ms -> {f_load * 1e3:.1f} ms, "
              f"step {statistics.median(r_steps) * 1e3:.1f} ms -> {statistics.median(f_steps) * 1e6:.0f} us",
              file=sys.stderr, flush=True)

    def stats(values: list[float]) -> dict[str, float]:
        return {"median_ms": statistics.median(values) * 1e3, "p90_ms": quantile(values, 0.9) * 1e3,
                "max_ms": max(values) * 1e3}

    summary = {
        "games": len(games), "steps_per_game": args.steps,
        "real": {"load_reset": stats(real_load), "step": stats(real_step)},
        "fast": {"load_reset": stats(fast_load), "step": stats(fast_step)},
    }
    summary["ratio"] = {
        "load_reset_median": summary["real"]["load_reset"]["median_ms"] / summary["fast"]["load_reset"]["median_ms"],
        "step_median": summary["real"]["step"]["median_ms"] / summary["fast"]["step"]["median_ms"],
        "step_p90": summary["real"]["step"]["p90_ms"] / summary["fast"]["step"]["p90_ms"],
    }
    write_report(args.out, {"summary": summary, "games": rows})

    print(f"{'':<14}{'real median':>14}{'real p90':>12}{'fast median':>14}{'fast p90':>12}{'ratio':>10}")
    for key, label in (("load_reset", "load+reset"), ("step", "step")):
        r, f = summary["real"][key], summary["fast"][key]
        print(f"{label:<14}{r['median_ms']:>11.2f} ms{r['p90_ms']:>9.2f} ms{f['median_ms']:>11.3f} ms"
              f"{f['p90_ms']:>9.3f} ms{r['median_ms'] / f['median_ms']:>9.0f}x")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
