"""Students of a recipe, measured by the results protocol: choices on ``dev``, held-out splits once per final
version, several seeds per claim, and every row with what its rerun needs.

    ALFWORLD_DATA=../shared/alfworld EVOHARNESS_DB=/work/runs/students.duckdb \
        python benchmarks/students.py --recipe small --grpo-seeds 0 1 2

Stages, each an ``evoharness`` command run in order (printed, and recorded with the rows they made); each resumes
(data and model versions are reused, evaluations keep finished episodes), so rerunning continues where it stopped:

- ``data``: the expert on every train game (dev games are not train games), consolidation, curation;
- ``sft``: the recipe's SFT, once per ``--sft-seeds``;
- ``dagger``: where the recipe has a ``dagger`` section, its DAgger round from each SFT version, once per
  ``--dagger-seeds`` (the relabelled play is greedy, so the seeds share it);
- ``grpo``: the recipe's curriculum and GRPO from each SFT version (each DAgger version where the recipe has a
  round), once per ``--grpo-seeds``;
- ``dev``: every version of the recipe played on ``dev`` (where choices are made);
- ``final``: every version played on ``valid_seen`` and ``valid_unseen``: run it once, for a final recipe (never
  with a ``--set`` variant other than seeds: variants are screens, decided on ``dev``);
- ``results``: benchmarks/results/students.json: one row per version (recipe, seed, command chain with launcher and
  environment, code version, precision and the CPU flags that chose it, success per split played, paired McNemar
  against the parent) and one claim per recipe stage over its seeds (mean, min–max, seeds significant); the claim
  of an earlier version of the recipe file stays, under ``<configuration> @<its sha256[:8]>``.

``--set`` overrides recipe values for every stage (a variant, recorded on its versions); ``--launch`` trains SFT and
GRPO under a launcher (two CPU processes: ``ACCELERATE_USE_CPU=true`` and ``--launch "accelerate launch
--config_file configs/accelerate/multi_cpu.yaml"``). Rows made by code before recipes are in
benchmarks/results/archive/.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import shutil
import statistics
import subprocess
import time
from pathlib import Path
from typing import Any

import report

from evoharness.evaluation.compare import paired_outcomes
from evoharness.evaluation.losses import lost_games, stage_counts
from evoharness.reporting.training_curves import grpo_seeds_png, seed_points
from evoharness.training.recipes import DEFAULT_RECIPE, Recipe, load_recipe, variant_overrides
from warehouse import Warehouse, default_db_path

RESULTS = report.RESULTS / "students.json"
"""Where rows go; a replicate on another machine (the same version ids, trained anew) names its own file
(``--results``), so rows of one machine never replace another's."""
CURVES = report.RESULTS / "curves"
DEV, HELD_OUT = ("dev",), ("valid_seen", "valid_unseen")
ENVIRONMENT = ("ALFWORLD_DATA", "EVOHARNESS_DB", "OMP_NUM_THREADS", "ACCELERATE_USE_CPU")
"""The environment a command's rerun needs, recorded in front of it."""
TEACHER = "expert"
"""The teacher whose data every row trains on."""
DATA = [["evoharness", "collect", "--teacher", TEACHER, "--split", "train"],
        ["evoharness", "consolidate", "--teacher", TEACHER],
        ["evoharness", "curate", "--teacher", TEACHER]]


def with_environment(command: list[str]) -> str:
    """``command`` as a shell line with the environment its rerun needs in front of it."""
    env = [f"{key}={shlex.quote(os.environ[key])}" for key in ENVIRONMENT if os.environ.get(key)]
    return " ".join([*env, shlex.join(command)])


def run(command: list[str]) -> None:
    print("$", with_environment(command), flush=True)
    started = time.perf_counter()
    subprocess.run(command, check=True, env=os.environ | report.this_checkout_env() | {
        "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1")})
    print(f"  ({time.perf_counter() - started:.0f} s)", flush=True)


def recipe_flags(recipe: Recipe, overrides: list[str], seed: int | None = None) -> list[str]:
    flags = ["--recipe", recipe.name, *[part for item in overrides for part in ("--set", item)]]
    return [*flags, "--seed", str(seed)] if seed is not None else flags


def launched(command: list[str], launch: str | None) -> list[str]:
    return [*command, "--launch", launch] if launch else command


def sft_command(recipe: Recipe, overrides: list[str], seed: int, launch: str | None) -> list[str]:
    return launched(["evoharness", "sft", "--teacher", TEACHER,
                     *recipe_flags(recipe, stage_overrides(overrides, "sft"), seed)], launch)


def dagger_command(recipe: Recipe, overrides: list[str], parent: str, seed: int, launch: str | None) -> list[str]:
    return launched(["evoharness", "dagger", "--model-version", parent,
                     *recipe_flags(recipe, stage_overrides(overrides, "dagger"), seed)], launch)


def grpo_command(recipe: Recipe, overrides: list[str], parent: str, seed: int, launch: str | None) -> list[str]:
    return launched(["evoharness", "grpo", "--parent-version", parent,
                     *recipe_flags(recipe, stage_overrides(overrides, "grpo"), seed)], launch)


def evaluate_command(version: str, splits: tuple[str, ...]) -> list[str]:
    return ["evoharness", "evaluate", "--model-version", version, *[p for s in splits for p in ("--split", s)]]


STAGE_SECTIONS = {"sft": ("sft.",), "dagger": ("relabel.", "dagger."), "grpo": ("curriculum.", "grpo.")}
"""The recipe sections whose overrides shape a version of each stage beyond its parent (a stage's command is given
only these: a version's parents are told apart by ``parent_version``)."""
STAGES = tuple(STAGE_SECTIONS)


def stage_of(row: dict[str, Any]) -> str:
    """A version's recipe stage: ``dagger`` for an SFT version that went on from a parent, else its own."""
    return "dagger" if row["stage"] == "sft" and row["parent_version"] else str(row["stage"])


def stage_overrides(overrides: list[str], stage: str) -> list[str]:
    """The overrides of ``stage``'s own sections, the seed left out (seeds tell replicates apart)."""
    return [o for o in variant_overrides(overrides) if o.startswith(STAGE_SECTIONS.get(stage, ()))]


def recipe_versions(db: str, recipe: Recipe, overrides: list[str]) -> list[dict[str, Any]]:
    """The versions this recipe file realized (trained, or named again and reused) from the expert's data with these
    overrides of their own stage (an SFT parent trained for another GRPO configuration is this one's too; the caller
    follows parents), any seed, oldest first, each once."""
    with Warehouse(db, read_only=True) as wh:
        columns, rows = wh.query("recipe_model_versions", recipe=recipe.name, recipe_sha256=recipe.sha256,
                                 teacher=TEACHER)
    found: dict[str, dict[str, Any]] = {}
    for row in (dict(zip(columns, r, strict=True)) for r in rows):
        given = json.loads(row["recipe_overrides"] or "[]")
        if stage_overrides(given, stage_of(row)) == stage_overrides(list(overrides), stage_of(row)):
            found.setdefault(row["model_version"], row | {"settings": json.loads(row["settings"]),
                                                          "recipe_stage": stage_of(row)})
    return list(found.values())


def played(db: str, policy: str, split: str) -> dict[str, Any] | None:
    """The policy's greedy play on a split at 70 steps (the policy_evaluation view's overall row) and where its lost
    games stopped (evoharness.evaluation.losses)."""
    with Warehouse(db, read_only=True) as wh:
        _, rows = wh.query("policy_split_summary", policy=policy, split=split, max_steps=70)
        lost = lost_games(wh, policy, split) if rows else []
    if not rows:
        return None
    episodes, success, steps, calls, repeats_lost = rows[0]
    return {"episodes": episodes, "success": success, "mean_steps": steps, "harness_calls": calls,
            "repeats_per_lost_game": repeats_lost, "lost_by_stage": stage_counts(lost)}


def against_parent(db: str, policy: str, parent: str) -> dict[str, Any]:
    """Game by game against the parent per split: only-child and only-parent wins, exact McNemar p."""
    with Warehouse(db, read_only=True) as wh:
        outcomes = paired_outcomes(wh, policy, parent)
    return {o.split: {"games": o.games, "only_child": o.only_policy, "only_parent": o.only_baseline,
                      "p_mcnemar": float(f"{o.p_value:.3g}")} for o in outcomes}


def precision(settings: dict[str, Any]) -> dict[str, Any]:
    """The precision a version trained in and what chose it (the recipe's ``bf16: auto`` follows the CPU flags)."""
    return {"bf16": settings["bf16"], "cpu_flags": report.machine()["cpu_flags"]}


def version_row(db: str, row: dict[str, Any], chain: list[str]) -> dict[str, Any]:
    """One version's row: ``chain`` (the commands that trained it) then the evaluations it played; a variant's
    held-out play, if any was made, is left out (it is a screen, decided on dev)."""
    overrides = json.loads(row["recipe_overrides"] or "[]")
    reported = (*DEV, *(() if variant_overrides(overrides) else HELD_OUT))
    splits = {split: result for split in reported if (result := played(db, row["model_version"], split))}
    evaluations = [with_environment(evaluate_command(row["model_version"], group)) for group in
                   (tuple(s for s in stage if s in splits) for stage in (DEV, HELD_OUT)) if group]
    parent = row["parent_version"]
    return {"model_version": row["model_version"], "stage": row["recipe_stage"], "parent_version": parent,
            "seed": row["settings"]["seed"], "recipe": row["recipe"], "recipe_sha256": row["recipe_sha256"],
            "recipe_overrides": overrides, "code_version": row["code_version"],
            "precision": precision(row["settings"]), "train_seconds": round(row["seconds"], 1),
            "splits_played": sorted(splits), **splits,
            "against_parent": against_parent(db, row["model_version"], parent) if parent else {},
            "command": [*chain, *evaluations],
            **({"curve": seed_points(json.loads(row.get("rollout_history") or "[]"))} if row["recipe_stage"] == "grpo"
               else {})}


def retrained(earlier: list[dict[str, Any]], rows: list[dict[str, Any]]) -> list[str]:
    """The versions of ``rows`` that ``earlier`` rows (a results file's) hold from another training: the same id with
    another training time or code (a warehouse rebuilt under the same ids trains other weights; its rows are another
    lineage and belong in another results file)."""
    before = {r["model_version"]: r for r in earlier}
    return [r["model_version"] for r in rows if r["model_version"] in before and any(
        before[r["model_version"]][key] != r[key] for key in ("train_seconds", "code_version"))]


def configuration_rows(runs: list[dict[str, Any]], recipe: Recipe, overrides: list[str]) -> list[dict[str, Any]]:
    """The rows of every version this recipe file and these overrides made (each stage's own overrides, any seed):
    those of this run and those an earlier run left in the results file, whose versions the warehouse may no longer
    hold (a claim and a chart are over every seed measured)."""
    return [r for r in runs if r["recipe"] == recipe.name and r["recipe_sha256"] == recipe.sha256
            and stage_overrides(r["recipe_overrides"], r["stage"]) == stage_overrides(overrides, r["stage"])]


def claims(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per stage and split, over the seeds: mean, min–max success, and how many seeds beat the parent (p < 0.05)."""
    found = []
    for stage in STAGES:
        of_stage = [r for r in rows if r["stage"] == stage]
        for split in (*DEV, *HELD_OUT):
            rates = [r[split]["success"] for r in of_stage if r.get(split) and r[split]["success"] is not None]
            if not rates:
                continue
            paired = [r["against_parent"].get(split) for r in of_stage if r["against_parent"].get(split)]
            found.append({"stage": stage, "split": split, "seeds": len(rates), "mean": round(statistics.mean(rates), 4),
                          "min": min(rates), "max": max(rates),
                          "seeds_better_than_parent_p05": sum(p["only_child"] > p["only_parent"] and
                                                              p["p_mcnemar"] < 0.05 for p in paired) if paired else None,
                          "mean_gain_over_parent": round(statistics.mean(
                              r[split]["success"] - parent_rate(rows, r, split) for r in of_stage
                              if r.get(split) and parent_rate(rows, r, split) is not None), 4) if paired else None})
    return found


def seed_curves(configuration: str, rows: list[dict[str, Any]]) -> str | None:
    """The configuration's GRPO seeds side by side from their rows' curves (``results/curves/<configuration>.png``,
    the configuration prefixed by a non-default results file's name); its path, or None when it has no GRPO row."""
    grpo = [row for row in rows if row["stage"] == "grpo"]
    if not grpo:
        return None
    path = curve_path(configuration)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(grpo_seeds_png(configuration, {row["seed"]: row["curve"] for row in grpo if "curve" in row},
                                    [row["seed"] for row in grpo if "curve" not in row]))
    return str(path.relative_to(report.RESULTS))


def curve_name(results: Path, configuration: str) -> str:
    """A configuration's curves' name: itself in the default results file, prefixed by another file's name (a
    replicate's curves never replace the default file's)."""
    return configuration if results == RESULTS else f"{results.stem} {configuration}"


def curve_path(configuration: str) -> Path:
    return CURVES / f"{re.sub(r'[^A-Za-z0-9_.=-]+', '_', configuration)}.png"


def parent_rate(rows: list[dict[str, Any]], row: dict[str, Any], split: str) -> float | None:
    parent = next((r for r in rows if r["model_version"] == row["parent_version"]), None)
    return parent[split]["success"] if parent and parent.get(split) else None


def configuration_name(recipe: Recipe, overrides: list[str]) -> str:
    """A configuration's key in the results file: the recipe's name and the overrides (``small grpo.beta=0``)."""
    return f"{recipe.name} {' '.join(overrides)}".strip()


def superseded_key(earlier: dict[str, Any], recipe: Recipe, overrides: list[str]) -> str | None:
    """Where the earlier claim (and curves) of this configuration move when its versions came from another version
    of the recipe file: ``<configuration> @<sha256[:8]>`` (editing a recipe never erases what its earlier version
    measured); None when there is no earlier claim or it was this version's."""
    configuration = configuration_name(recipe, overrides)
    shas = sorted({r["recipe_sha256"] for r in earlier.get("runs", []) if r["recipe"] == recipe.name
                   and variant_overrides(r["recipe_overrides"]) == variant_overrides(overrides)})
    if configuration not in earlier.get("claims", {}) or not shas or recipe.sha256 in shas:
        return None
    return f"{configuration} @{'+'.join(sha[:8] for sha in shas)}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    stages = ["data", "sft", "dagger", "grpo", "dev", "final", "results"]
    parser.add_argument("--stages", nargs="+", default=["data", "sft", "dagger", "grpo", "dev", "results"],
                        choices=stages)
    parser.add_argument("--recipe", default=DEFAULT_RECIPE)
    parser.add_argument("--set", dest="overrides", action="append", default=[],
                        help="override a recipe value for every stage (section.field=value), repeatable")
    parser.add_argument("--sft-seeds", nargs="+", type=int, default=[0])
    parser.add_argument("--dagger-seeds", nargs="+", type=int, default=[0])
    parser.add_argument("--grpo-seeds", nargs="+", type=int, default=[0, 1, 2])
    parser.add_argument("--launch", default=None, help="train SFT and GRPO under this launcher")
    parser.add_argument("--results", default=RESULTS.name,
                        help="the file under benchmarks/results/ that the results stage writes: a replicate on "
                             "another machine names its own (e.g. students_zen4.json)")
    args = parser.parse_args()
    results = report.RESULTS / args.results
    if "final" in args.stages and variant_overrides(args.overrides):
        parser.error("--stages final plays the held-out splits, which are for a recipe as shipped; a --set variant is "
                     "a screen, decided on dev (write the values into a recipe file to make it final)")
    recipe = load_recipe(args.recipe, args.overrides)
    db = str(default_db_path())
    if "data" in args.stages:
        for command in DATA:
            run(command)
    sft_commands = {seed: sft_command(recipe, args.overrides, seed, args.launch) for seed in args.sft_seeds}
    if "sft" in args.stages:
        for command in sft_commands.values():
            run(command)
    sft_rows = [r for r in recipe_versions(db, recipe, args.overrides) if r["recipe_stage"] == "sft"]
    chains: dict[str, list[str]] = {row["model_version"]: [with_environment(c) for c in [
        *DATA, sft_commands.get(row["settings"]["seed"], ["?"])]] for row in sft_rows}
    # parents: every version of the stage before (their children are reported); trained_from: those of the seeds
    # asked for (the next stage trains from these only)
    parents = list(chains)
    trained_from = [r["model_version"] for r in sft_rows if r["settings"]["seed"] in args.sft_seeds]
    for stage, command_of, seeds in (("dagger", dagger_command, args.dagger_seeds),
                                     ("grpo", grpo_command, args.grpo_seeds)):
        if stage == "dagger" and recipe.dagger is None:
            continue
        if stage in args.stages:
            for parent in trained_from:
                for seed in seeds:
                    run(command_of(recipe, args.overrides, parent, seed, args.launch))
        made = [r for r in recipe_versions(db, recipe, args.overrides)
                if r["recipe_stage"] == stage and r["parent_version"] in parents]
        for row in made:
            command = command_of(recipe, args.overrides, row["parent_version"], row["settings"]["seed"], args.launch)
            chains[row["model_version"]] = [*chains[row["parent_version"]], with_environment(command)]
        parents = [row["model_version"] for row in made]
        trained_from = [row["model_version"] for row in made
                        if row["settings"]["seed"] in seeds and row["parent_version"] in trained_from]
    versions = recipe_versions(db, recipe, args.overrides)
    for stage, splits in (("dev", DEV), ("final", HELD_OUT)):
        if stage in args.stages:
            for version in chains:
                run(evaluate_command(version, splits))
    if "results" in args.stages:
        rows = [version_row(db, row, chains[row["model_version"]]) for row in versions if row["model_version"] in chains]
        earlier = json.loads(results.read_text()) if results.is_file() else {}
        if others := retrained(earlier.get("runs", []), rows):
            raise SystemExit(f"students.py: {results.name} holds {', '.join(others)} from another training than this "
                             "warehouse's (same id, other weights): write this lineage to another --results file")
        kept = [r for r in earlier.get("runs", []) if r["model_version"] not in chains]
        every = [*kept, *rows]
        measured = configuration_rows(every, recipe, args.overrides)
        configuration = configuration_name(recipe, args.overrides)
        kept_claims, kept_curves = dict(earlier.get("claims", {})), dict(earlier.get("curves", {}))
        if superseded := superseded_key(earlier, recipe, args.overrides):
            kept_claims[superseded] = kept_claims[configuration]
            if configuration in kept_curves:  # the earlier file's PNG, before this configuration's replaces it
                moved = curve_path(curve_name(results, superseded))
                shutil.copyfile(report.RESULTS / kept_curves[configuration], moved)
                kept_curves[superseded] = str(moved.relative_to(report.RESULTS))
        curves = seed_curves(curve_name(results, configuration), measured)
        report.write_report(results, {"command": "python benchmarks/students.py --recipe NAME [--set ...]",
                                      "runs": every, "claims": kept_claims | {configuration: claims(measured)},
                                      "curves": kept_curves | ({configuration: curves} if curves else {})})
        print(f"wrote {results}")


if __name__ == "__main__":
    main()
