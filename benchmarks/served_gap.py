"""How a served student differs from the same model played locally: the version played greedily on the first
``--limit`` games of ``--split``, each arm in its own copy of the warehouse (so none resumes another's episodes):

- ``local_constrained``: in this process, under the action constraint (how a version is evaluated);
- ``local_unconstrained``: in this process, free decoding;
- ``transformers_serve``: behind ``transformers serve``, which has no structured outputs (free decoding);
- ``engine_server``: behind the engine server (``evoharness serve --server evoharness``), the turn grammar sent in
  vLLM's ``structured_outputs`` field on every turn.

For each served arm: games won, and the games whose whole trajectory (every action) equals the local arm that
decodes the same way, with the first parting turn of the others. Greedy decisions equal up to floating-point
summation order are the bar (the engine server decodes with the local engine).

    ALFWORLD_DATA=../shared/alfworld python benchmarks/served_gap.py --db WAREHOUSE --model-version V \\
        [--split train] [--limit 40]

Writes ``benchmarks/results/served_gap.json``.
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

import report

from evoharness.evaluation.run import EvaluationConfig, evaluate
from evoharness.serving import ServedModel, ServeSettings
from evoharness.teachers.clients.structured import StructuredOutputs
from warehouse import Warehouse

ARMS = ("local_constrained", "local_unconstrained", "transformers_serve", "engine_server")
SAME_DECODING = {"transformers_serve": "local_unconstrained", "engine_server": "local_constrained"}
"""Each served arm and the local arm that decodes as it should."""


def trajectories(db: Path, policy: str, split: str) -> dict[str, tuple[bool, list[str]]]:
    """Per game of ``policy`` on ``split``: whether it was won and its actions in order."""
    with Warehouse(db, read_only=True) as wh:
        rows = wh.con.execute(
            "SELECT e.game_id, e.won, list(s.action ORDER BY s.t) FROM episodes e JOIN steps s USING (episode_id) "
            "WHERE e.teacher = ? AND e.split = ? AND e.status = 'finished' GROUP BY e.game_id, e.won",
            [policy, split]).fetchall()
    return {game: (bool(won), list(actions)) for game, won, actions in rows}


def first_parting(local: list[str], served: list[str]) -> dict[str, Any] | None:
    """The first turn where two trajectories' actions differ (None: the same trajectory)."""
    for t, (a, b) in enumerate(zip(local, served, strict=False)):
        if a != b:
            return {"turn": t, "local": a, "served": b}
    return None if len(local) == len(served) else {"turn": min(len(local), len(served)), "local": None,
                                                     "served": None}


def play(db: Path, arm: str, model_version: str, model_dir: str, split: str, limit: int) -> tuple[str, float]:
    """Play ``arm`` into ``db``; the policy its episodes are stored under and the wall seconds it took."""
    local = arm.startswith("local_")
    config = EvaluationConfig(model_version=model_version, splits=(split,), limit=limit,
                              constrain_actions=arm != "local_unconstrained", processes=1 if not local else None)
    started = time.perf_counter()
    if local:
        with Warehouse(db) as wh:
            result = evaluate(wh, config, f"served-gap-{arm}")
    else:
        server = "evoharness" if arm == "engine_server" else "transformers"
        with ServedModel(model_dir, ServeSettings(server=server)) as served:
            config = config.model_copy(update={
                "serve_url": served.base_url, "served_model": served.model,
                "structured_outputs": StructuredOutputs.VLLM if server == "evoharness" else None})
            with Warehouse(db) as wh:
                result = evaluate(wh, config, f"served-gap-{arm}")
    if result.by_split[split].skipped:
        raise SystemExit(f"{model_version} already played {split} games in {arm}'s copy: this compares fresh play")
    return config.policy, round(time.perf_counter() - started, 1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--db", type=Path, required=True)
    parser.add_argument("--model-version", required=True)
    parser.add_argument("--split", default="train")
    parser.add_argument("--limit", type=int, default=40)
    args = parser.parse_args()
    with Warehouse(args.db, read_only=True) as wh:
        model_dir = wh.one("model_version_player", model_version=args.model_version)[0]
    played: dict[str, dict[str, tuple[bool, list[str]]]] = {}
    seconds: dict[str, float] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for arm in ARMS:
            db = Path(shutil.copy(args.db, Path(tmp) / f"{arm}.duckdb"))
            policy, seconds[arm] = play(db, arm, args.model_version, model_dir, args.split, args.limit)
            played[arm] = trajectories(db, policy, args.split)
            db.unlink()
            print(arm, sum(won for won, _ in played[arm].values()), "won", seconds[arm], "s", flush=True)
    games = sorted(set.intersection(*(set(p) for p in played.values())))
    served: dict[str, Any] = {}
    for arm, reference in SAME_DECODING.items():
        partings = {g: first_parting(played[reference][g][1], played[arm][g][1]) for g in games}
        served[arm] = {"same_as": reference, "same_trajectory": sum(p is None for p in partings.values()),
                       "partings": [p | {"game": g} for g, p in partings.items() if p is not None]}
    row = {"model_version": args.model_version, "split": args.split, "games": len(games),
           "won": {arm: sum(played[arm][g][0] for g in games) for arm in ARMS}, "wall_seconds": seconds,
           "served": served}
    report.write_report(report.RESULTS / "served_gap.json", row,
                        command=report.command_line().replace(str(args.db), "WAREHOUSE"))
    print(row["won"], {arm: s["same_trajectory"] for arm, s in served.items()})


if __name__ == "__main__":
    main()
