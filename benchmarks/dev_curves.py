"""GRPO versions played on ``dev`` at the checkpoints their training saved: success and harness calls by optimizer
step, every version a line, the parent at step 0. Training curves do not decide (each step plays newly drawn
games); these do, because every point is the same 150 ``dev`` games played greedily. A step is chosen here, never
on the held-out splits (``evaluate --checkpoint`` refuses them).

    ALFWORLD_DATA=../shared/alfworld EVOHARNESS_DB=WAREHOUSE python benchmarks/dev_curves.py \\
        --name "small" --model-version V0 V1 V2 --steps 6 12 18 24

Each point is ``evoharness evaluate --model-version V --checkpoint N --split dev`` (stored as the policy
``V.step-N``, resumable: rerunning plays only what is missing); the final weights are the last step. Writes
``benchmarks/results/dev_curves.json`` (one entry per ``--name``, the others kept) and
``benchmarks/results/curves/<name>_dev.png``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
from typing import Any

import report
import students

from evoharness.reporting.charts import panels_chart_png
from warehouse import Warehouse, default_db_path

RESULTS = report.RESULTS / "dev_curves.json"
SPLIT = "dev"


def played(policy: str) -> dict[str, Any] | None:
    """The policy's greedy play on dev, if stored."""
    return students.played(str(default_db_path()), policy, SPLIT)


def version_facts(version: str) -> tuple[str | None, int]:
    """The version's parent and the optimizer steps its training ran."""
    with Warehouse(default_db_path(), read_only=True) as wh:
        row = wh.con.execute("SELECT parent_version, steps FROM model_versions WHERE model_version = ?",
                             [version]).fetchone()
    if row is None:
        raise SystemExit(f"unknown model version {version!r}")
    return row[0], int(row[1])


def evaluate(version: str, checkpoint: int | None) -> None:
    command = ["evoharness", "evaluate", "--model-version", version, "--split", SPLIT,
               *(["--checkpoint", str(checkpoint)] if checkpoint is not None else [])]
    print("$", " ".join(command), flush=True)
    subprocess.run(command, check=True, env=os.environ | report.this_checkout_env())


def curve(version: str, steps: list[int]) -> dict[str, Any]:
    """The version's points: its parent at step 0, each checkpoint asked for, and its final weights."""
    parent, trained = version_facts(version)
    points: dict[int, str] = {0: parent} if parent else {}
    points |= {step: f"{version}.step-{step}" for step in steps if step < trained}
    points[trained] = version
    for step, policy in points.items():
        if played(policy) is None:
            evaluate(parent if step == 0 and parent else version,
                     None if policy in (version, parent) else step)
    return {"parent_version": parent, "points": [{"step": step, "policy": policy, **(played(policy) or {})}
                                                 for step, policy in sorted(points.items())]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--name", required=True, help="the configuration the versions are seeds of")
    parser.add_argument("--model-version", nargs="+", required=True, dest="versions")
    parser.add_argument("--steps", nargs="+", type=int, required=True, help="checkpoint steps to play")
    args = parser.parse_args()
    curves = {version: curve(version, args.steps) for version in args.versions}
    panels = {panel: {version: [(p["step"], p[key]) for p in entry["points"] if p.get(key) is not None]
                      for version, entry in curves.items()}
              for panel, key in (("dev success", "success"), ("harness calls / episode", "harness_calls"))}
    png = students.curve_path(f"{args.name}_dev")
    png.parent.mkdir(parents=True, exist_ok=True)
    png.write_bytes(panels_chart_png(panels, f"{args.name}: greedy play on dev by optimizer step", "optimizer step"))
    earlier = json.loads(RESULTS.read_text()).get("curves", {}) if RESULTS.is_file() else {}
    report.write_report(RESULTS, {"curves": earlier | {args.name: {
        "versions": curves, "png": str(png.relative_to(report.RESULTS)), "command": report.command_line(),
        **report.commit()}}})
    for version, entry in curves.items():
        print(version, [(p["step"], p.get("success")) for p in entry["points"]])


if __name__ == "__main__":
    main()
