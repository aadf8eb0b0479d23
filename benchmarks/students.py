"""The student results of issue #9: BPE SFT (the ``small`` preset: 4 epochs on the student rendering), GRPO from
it, DAgger from it (the student plays train games, the expert labels its states, training goes on from its weights
on its dataset plus those labels), and a ReAct SFT student trained on as many tokens as the BPE one (equal compute),
each played greedily on the full valid_seen (140) and valid_unseen (134) splits with a 70-step budget; the
no-repeat stage also plays the BPE student and its newest child greedily without repeats (``--avoid-repeats``:
never the same command in the same state), each its own run ``<version>.no-repeat``.

    ALFWORLD_DATA=../shared/alfworld EVOHARNESS_DB=.evoharness/students.duckdb python benchmarks/students.py

Every stage is an ``evoharness`` command run in order (printed and recorded with its result); each is
resumable (data and model versions are reused, evaluations keep finished episodes), so rerunning the script
continues where it stopped. ``--stages`` picks the stages to run; ``--sft-epochs`` trains the SFT students for
fewer passes (a cheaper parent for GRPO); ``--grpo-steps`` and ``--token-level-loss`` set the GRPO stage's run;
``--launch`` trains SFT and GRPO under a launcher (two CPU processes: ``ACCELERATE_USE_CPU=true`` and ``--launch
"accelerate launch --config_file configs/accelerate/multi_cpu.yaml"``). The GRPO stage is the measured recipe: the
BPE student plays the first 200 train games greedily, then guided GRPO draws the games it lost (``--curriculum-from``,
``--guided-per-group 2``). Results go to benchmarks/results/students.json; runs of versions an earlier warehouse held
stay in it.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import time
from pathlib import Path

from evoharness.evaluation.compare import paired_outcomes
from evoharness.evaluation.run import NO_REPEAT_SUFFIX
from evoharness.training.reward import RewardConfig
from evoharness.training.sft import SFTSettings
from warehouse import Warehouse

RESULTS = Path(__file__).resolve().parent / "results" / "students.json"
GRPO_SETTINGS = ["--max-steps", "12", "--games-per-step", "4", "--num-generations", "4", "--guided-per-group", "2",
                 "--learning-rate", "2e-4", "--save-steps", "2"]
CURRICULUM_GAMES = "200"  # train games the BPE student plays greedily; GRPO draws the ones it lost
# the rest from the small preset (batch-std advantages, bf16 training passes, 70-step episodes, T 1.0, only the tokens
# that were a choice scored)
GRPO_FLAGS = {"--max-steps": "max_steps", "--games-per-step": "games_per_step", "--num-generations": "num_generations",
              "--learning-rate": "learning_rate", "--temperature": "temperature", "--scale-rewards": "scale_rewards",
              "--episode-steps": "episode_steps", "--save-steps": "save_steps"}
DAGGER_GAMES, DAGGER_STEPS, DAGGER_LR = "300", "1500", "1e-4"  # 300 train games relabelled; 1,500 steps on the aggregate
SPLIT_GAMES = {"valid_seen": 140, "valid_unseen": 134}  # an evaluation stopped early says so (resumable)
DATA = [
    ["evoharness", "collect", "--teacher", "expert", "--split", "train", "--limit", "900"],
    ["evoharness", "consolidate", "--teacher", "expert"],
    ["evoharness", "curate", "--teacher", "expert"],
]
SFT_BPE = ["evoharness", "sft", "--teacher", "expert", "--base-model", "small"]


def sft_command(db: str, view: str, epochs: float | None = None) -> list[str]:
    """The BPE student on the preset (or ``epochs`` passes); the ReAct student on the preset for as many input
    tokens as the BPE one saw."""
    bpe_command = [*SFT_BPE, *(["--epochs", f"{epochs:g}"] if epochs is not None else [])]
    if view == "bpe":
        return bpe_command
    bpe = next(row for row in reversed(versions(db)) if row["model_version"] == sft_version(db, "bpe", epochs))
    return [*bpe_command, "--view", "react", "--max-tokens", str(bpe["tokens_seen"])]


def run(command: list[str]) -> None:
    print("$", " ".join(command), flush=True)
    started = time.perf_counter()
    subprocess.run(command, check=True, env=os.environ | {"OMP_NUM_THREADS": "1"})
    print(f"  ({time.perf_counter() - started:.0f} s)", flush=True)


def launched(command: list[str], launch: str | None) -> list[str]:
    """``command`` (an ``evoharness sft`` or ``grpo``) run under ``launch``, if given."""
    return [*command, "--launch", launch] if launch else command


def descendants(rows: list[dict], root: str) -> list[dict]:
    """The versions trained from ``root`` and from those in turn, in the order ``rows`` (creation order) has them."""
    family, found = {root}, []
    for row in rows:
        if row["parent_version"] in family:
            family.add(row["model_version"])
            found.append(row)
    return found


def versions(db: str) -> list[dict]:
    with Warehouse(db, read_only=True) as wh:  # waits while a running stage holds the file
        cursor = wh.con.execute("SELECT model_version, stage, parent_version, settings, parameters, seconds, "
                                "tokens_seen, rollout_history, run_id "
                                "FROM model_versions WHERE base_model = 'small' OR parent_version IS NOT NULL "
                                "ORDER BY created_at")
        names = [d[0] for d in cursor.description]
        return [dict(zip(names, row, strict=True)) for row in cursor.fetchall()]


def sft_version(db: str, view: str, epochs: float | None = None) -> str:
    """The newest SFT version of ``view`` trained from scratch on the preset's prompt set and epochs (or
    ``epochs``)."""
    preset = SFTSettings.local_student("small", view=view)
    for row in reversed(versions(db)):
        settings = json.loads(row["settings"])
        if row["stage"] == "sft" and row["parent_version"] is None and settings["view"] == view \
                and settings["prompt_set"] == preset.prompt_set and settings["epochs"] == (epochs or preset.epochs) \
                and (view == "react" or settings["max_steps"] is None):
            return str(row["model_version"])
    raise LookupError(f"no {view} SFT version on the small preset: run the sft stage")


def evaluation(db: str, policy: str) -> dict[str, dict[str, float]]:
    """The policy's overall row per split of the ``policy_evaluation`` view (the one success_rate definition)."""
    with Warehouse(db, read_only=True) as wh:
        rows = wh.con.execute(
            "SELECT split, finished, success_rate, mean_steps, mean_harness_calls, mean_repeats, mean_repeats_lost "
            "FROM policy_evaluation WHERE policy = ? AND max_steps = 70 AND task_type = 'ALL'", [policy]).fetchall()
    return {split: {"episodes": n, "games_in_split": SPLIT_GAMES[split], "complete": n == SPLIT_GAMES[split],
                    "success": success, "mean_steps": steps, "harness_calls": calls, "repeats": repeats,
                    "repeats_per_lost_game": repeats_lost}
            for split, n, success, steps, calls, repeats, repeats_lost in rows}


def against_parent(db: str, policy: str, parent_policy: str) -> dict:
    """``policy`` against its parent played the same way, game by game per split (only-child / only-parent wins,
    exact McNemar p); empty when they share no game."""
    with Warehouse(db, read_only=True) as wh:
        outcomes = paired_outcomes(wh, policy, parent_policy)
    return {"against_parent": {o.split: {"games": o.games, "only_child": o.only_policy,
                                         "only_parent": o.only_baseline, "p_mcnemar": float(f"{o.p_value:.3g}")}
                               for o in outcomes}} if outcomes else {}


def grpo_curve(row: dict) -> dict:
    """The GRPO run's per-step curve (success, harness calls per episode, reward terms), also drawn as a PNG."""
    from evoharness.reporting.charts import save_png
    from evoharness.reporting.training_curves import grpo_curve_table, grpo_curves_png

    history = json.loads(row["rollout_history"] or "[]")
    png = save_png(grpo_curves_png(row["model_version"], history), RESULTS.parent / f"{row['model_version']}_curves.png")
    columns, rows = grpo_curve_table(history)
    return {"curve_png": str(png.relative_to(RESULTS.parents[2])), "curve_columns": columns, "curve": rows}


def grpo_command(parent: str, settings: dict) -> list[str]:
    """The `evoharness grpo` command that trains a GRPO version with these stored settings."""
    flags = [part for flag, key in GRPO_FLAGS.items() for part in (flag, str(settings[key]))]
    call_cost, repeat_cap = settings["reward"]["call_cost"], settings["reward"]["repeat_cap"]
    forced = settings.get("forced_tokens_in_loss", True)  # runs before the setting scored every token
    return ["evoharness", "grpo", "--parent-version", parent, *flags,
            *(["--games-limit", str(settings["games_limit"])] if settings.get("games_limit") else []),
            *(["--curriculum-from", settings["games_from"]] if settings.get("games_from") else []),
            *(["--call-cost", str(call_cost)] if call_cost else []),
            *(["--repeat-cap", str(repeat_cap)] if repeat_cap != RewardConfig().repeat_cap else []),
            *(["--avoid-repeats"] if settings.get("avoid_repeats") else []),
            *(["--guided-per-group", str(settings["guided_per_group"])] if settings.get("guided_per_group") else []),
            "--episode-level-loss" if settings.get("episode_level_loss") else "--no-episode-level-loss",
            *(["--seed", str(settings["seed"])] if settings.get("seed") else []),
            *(["--forced-tokens-in-loss"] if forced else [])]


def curriculum_commands(db: str, settings: dict) -> list[list[str]]:
    """The evaluation on train games whose lost games a curriculum GRPO run drew (none without a curriculum)."""
    policy = settings.get("games_from")
    if not policy:
        return []
    with Warehouse(db, read_only=True) as wh:
        played = wh.scalar("SELECT count(DISTINCT game_id) FROM episodes WHERE teacher = ? AND split = 'train' "
                           "AND max_steps = ?", [policy, settings["episode_steps"]])
    return [["evoharness", "evaluate", "--model-version", policy, "--split", "train", "--limit", str(played)]]


def no_repeat_command(version: str) -> list[str]:
    """The evaluation that plays ``version`` greedily without repeats (policy '<version>.no-repeat')."""
    return ["evoharness", "evaluate", "--model-version", version, "--avoid-repeats"]


def dagger_commands(db: str, parent: str, settings: dict) -> list[list[str]]:
    """The `evoharness relabel` and `evoharness sft --parent-version` commands that made a DAgger version."""
    with Warehouse(db, read_only=True) as wh:
        dataset = wh.con.execute("SELECT dataset_id FROM datasets WHERE config->>'relabelled_by' = ? "
                                 "ORDER BY created_at DESC", [parent]).fetchone()
    return [["evoharness", "relabel", "--model-version", parent, "--limit", DAGGER_GAMES],
            ["evoharness", "sft", "--parent-version", parent, "--dataset", dataset[0] if dataset else "?",
             "--max-steps", str(settings["max_steps"]), "--learning-rate", str(settings["learning_rate"])]]


def write_results(db: str, commands: dict[str, list[list[str]]]) -> None:
    """One run per model version played greedily, and one more per version also played without repeats. Runs
    already in the file from trainings this warehouse does not hold (an earlier warehouse's, told apart by the
    training's run id: the same command on another machine trains the same version id anew) are kept."""
    held = {(row["model_version"], row["run_id"]) for row in versions(db)}
    earlier = json.loads(RESULTS.read_text())["runs"] if RESULTS.is_file() else []
    runs = [r for r in earlier if (r.get("model_version", r["name"]), r.get("run_id")) not in held]
    for row in versions(db):
        settings = json.loads(row["settings"])
        name = row["model_version"]
        view = "bpe" if row["stage"] == "grpo" else settings.get("view", "bpe")
        stage = "dagger" if row["stage"] == "sft" and row["parent_version"] else row["stage"]
        made = [" ".join(c) for c in commands.get(name, [])]
        run = {"name": name, "model_version": name, "decoding": "greedy", "stage": stage, "mode": view,
               "parameters": row["parameters"], "parent_version": row["parent_version"],
               "train_seconds": round(row["seconds"], 1), "tokens_seen": row["tokens_seen"], "run_id": row["run_id"]}
        parent = row["parent_version"]
        runs.append(run | evaluation(db, name) | (against_parent(db, name, parent) if parent else {}) |
                    (grpo_curve(row) if row["stage"] == "grpo" else {}) | {"command": made})
        no_repeat = evaluation(db, name + NO_REPEAT_SUFFIX)
        if no_repeat:
            runs.append(run | {"name": name + NO_REPEAT_SUFFIX, "decoding": "greedy, no repeats"} | no_repeat |
                        (against_parent(db, name + NO_REPEAT_SUFFIX, parent + NO_REPEAT_SUFFIX) if parent else {}) |
                        {"command": [*made[:-1], " ".join(no_repeat_command(name))]})
    RESULTS.write_text(json.dumps({"command": "python benchmarks/students.py", "runs": runs}, indent=1) + "\n")
    print(f"wrote {RESULTS}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    stages = ["data", "sft", "evaluate", "grpo", "dagger", "no-repeat", "results"]
    parser.add_argument("--stages", nargs="+", default=stages, choices=stages)
    parser.add_argument("--views", nargs="+", default=["bpe", "react"], choices=["bpe", "react"],
                        help="the students the sft and evaluate stages train and play (react needs the bpe one)")
    parser.add_argument("--sft-epochs", type=float, default=None,
                        help="passes of the SFT students over the train split [default: the small preset's]")
    parser.add_argument("--grpo-steps", type=int, default=None,
                        help=f"GRPO steps [default: {GRPO_SETTINGS[GRPO_SETTINGS.index('--max-steps') + 1]}]")
    parser.add_argument("--token-level-loss", action="store_true",
                        help="GRPO with every scored token weighted alike (evoharness grpo --no-episode-level-loss) "
                             "[default: the preset's, every episode alike]")
    parser.add_argument("--launch", default=None,
                        help="train SFT and GRPO under this launcher (evoharness sft/grpo --launch), e.g. two CPU "
                             "processes: ACCELERATE_USE_CPU=true and --launch 'accelerate launch --config_file "
                             "configs/accelerate/multi_cpu.yaml' [default: one process]")
    args = parser.parse_args()
    db = os.environ.get("EVOHARNESS_DB", ".evoharness/warehouse.duckdb")
    if "data" in args.stages:
        for command in DATA:
            run(command)
    if "sft" in args.stages:
        for view in args.views:
            run(launched(sft_command(db, view, args.sft_epochs), args.launch))
    commands: dict[str, list[list[str]]] = {}
    students: dict[str, str] = {}
    if {"evaluate", "grpo", "dagger", "no-repeat", "results"} & set(args.stages):
        for view in ("bpe", "react"):
            try:
                students[view] = sft_version(db, view, args.sft_epochs)
            except LookupError:
                if view in args.views and {"evaluate", "grpo", "dagger", "no-repeat"} & set(args.stages):
                    raise  # the results stage writes what exists

    for view, version in students.items():
        commands[version] = [*DATA, sft_command(db, view, args.sft_epochs),
                             ["evoharness", "evaluate", "--model-version", version]]
    if "evaluate" in args.stages:
        for view in args.views:
            run(["evoharness", "evaluate", "--model-version", students[view]])
    grpo_settings = list(GRPO_SETTINGS)
    if args.grpo_steps:
        grpo_settings[grpo_settings.index("--max-steps") + 1] = str(args.grpo_steps)
    bpe = students.get("bpe", "?")
    grpo = ["evoharness", "grpo", "--parent-version", bpe, "--curriculum-from", bpe, *grpo_settings,
            *(["--no-episode-level-loss"] if args.token_level_loss else [])]
    if "grpo" in args.stages:
        run(["evoharness", "evaluate", "--model-version", bpe, "--split", "train", "--limit", CURRICULUM_GAMES])
        run(launched(grpo, args.launch))
    if "dagger" in args.stages:
        dagger = {"max_steps": DAGGER_STEPS, "learning_rate": DAGGER_LR}
        run(dagger_commands(db, bpe, dagger)[0])  # relabel: the relabelled dataset's id exists after it
        run(dagger_commands(db, bpe, dagger)[1])
    family = descendants(versions(db), bpe) if students else []
    for child in family:  # every GRPO and DAgger run from the BPE student or its children, with the commands that made it
        evaluate_child = ["evoharness", "evaluate", "--model-version", child["model_version"]]
        if {"grpo", "dagger"} & set(args.stages) and child is family[-1]:
            run(evaluate_child)
        settings, parent = json.loads(child["settings"]), child["parent_version"]
        made = [*curriculum_commands(db, settings), grpo_command(parent, settings)] \
            if child["stage"] == "grpo" else dagger_commands(db, parent, settings)
        commands[child["model_version"]] = [*commands[parent][:-1], *made, evaluate_child]
    if "no-repeat" in args.stages:  # the BPE student and its newest descendant, each played without repeats
        for version in [bpe, *[c["model_version"] for c in family[-1:]]]:
            run(no_repeat_command(version))
    if "results" in args.stages:
        write_results(db, commands)


if __name__ == "__main__":
    main()
