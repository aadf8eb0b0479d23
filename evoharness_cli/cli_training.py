"""``evoharness sft | grpo | evaluate | relabel``: train student model versions, play them on the evaluation splits,
and relabel the states they reach with the expert (DAgger)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Annotated

import typer
from pydantic import ValidationError

from evoharness.curation.relabelled import curate_relabelled
from evoharness.evaluation.compare import PairedOutcome, paired_outcomes
from evoharness.evaluation.run import EVAL_SPLITS, EvaluationConfig, evaluate
from evoharness.harness.prompts import Mode
from evoharness.lineage import new_run_id
from evoharness.training.curriculum import with_curriculum
from evoharness.training.grpo import GRPOSettings
from evoharness.training.model_versions import (
    ModelVersion,
    TrainingJob,
    continued_sft_settings,
    plan_grpo_version,
    plan_sft_version,
    store_training_result,
    teacher_datasets,
    teacher_sft_versions,
    train_grpo_version,
    train_sft_version,
)
from evoharness.training.relabel import LabelMode, RelabelConfig, collect_expert_labels
from evoharness.training.sft import SFTSettings
from evoharness.training.tiny_student import STUDENT_PRESETS, TINY
from evoharness.training.trainer_utils import LogCallback
from evoharness_cli.cli_common import (
    DbOption,
    console,
    print_table,
    progress_reporter,
    quiet_third_party,
    validation_message,
)
from warehouse import Warehouse, default_db_path


def choose(ids: list[str], what: str, owner: str) -> str:
    """The first (newest) of ``ids``, said out loud, or a clear error when there is none."""
    if not ids:
        raise typer.BadParameter(f"no {what} for teacher {owner!r} yet")
    console.print(f"{what}: {ids[0]} (the teacher's latest; choose another by id)")
    return ids[0]


def sft_command(
    teacher: Annotated[str, typer.Option(help="Teacher whose latest curated dataset to train on (see --dataset).")
                       ] = "expert",
    dataset: Annotated[str | None, typer.Option(help="Dataset id to train on (e.g. sft@v2) [default: the "
                                                     "teacher's latest].")] = None,
    base_model: Annotated[str, typer.Option(help="Hub id (e.g. Qwen/Qwen3-8B), local folder, or a student built "
                                                 f"here: {' | '.join(STUDENT_PRESETS)}.")] = TINY,
    parent_version: Annotated[str | None, typer.Option(help="Go on training this model version's weights with its "
                                                            "settings (e.g. on its relabelled dataset); replaces "
                                                            "--base-model.")] = None,
    epochs: Annotated[float | None, typer.Option(help="Passes over the training split [default: preset].")] = None,
    learning_rate: Annotated[float | None, typer.Option(help="[default: preset]")] = None,
    batch_size: Annotated[int | None, typer.Option(help="Examples per optimizer step [default: preset].")] = None,
    max_length: Annotated[int | None, typer.Option(help="Tokens per example [default: 4096].")] = None,
    lora_r: Annotated[int | None, typer.Option(help="LoRA rank, alpha = 2r; 0: full fine-tuning "
                                                    "[default: 64 for a hub model, full for tiny].")] = None,
    max_steps: Annotated[int | None, typer.Option(help="Stop after this many optimizer steps.")] = None,
    max_tokens: Annotated[int | None, typer.Option(help="Train for about this many input tokens (sets the steps; "
                                                        "an equal-compute baseline).")] = None,
    view: Annotated[str | None, typer.Option(help="bpe, or react: the dataset's environment turns without the "
                                                  "workspace [default: bpe].")] = None,
    prompt_set: Annotated[str | None, typer.Option(help="Re-render every turn with this prompt set [default: "
                                                        "the preset's; the stored rendering for hub models].")] = None,
    seed: Annotated[int | None, typer.Option(help=SEED_HELP)] = None,
    models_dir: Annotated[str | None, typer.Option(help="[default: <warehouse folder>/models]")] = None,
    launch: Annotated[str | None, typer.Option(help=LAUNCH_HELP)] = None,
    db: DbOption = None,
) -> None:
    """Fine-tune a student with TRL (SFT) and record it as a model version (same dataset + settings: reused)."""
    overrides = {"epochs": epochs, "learning_rate": learning_rate, "batch_size": batch_size, "max_length": max_length,
                 "max_steps": max_steps, "max_tokens": max_tokens, "view": view, "prompt_set": prompt_set,
                 "seed": seed}
    with Warehouse(db or default_db_path()) as wh:
        try:
            settings = continued_sft_settings(wh, parent_version, **overrides) if parent_version else \
                SFTSettings.for_base(base_model, lora_r=lora_r, **overrides)
        except LookupError as exc:
            raise typer.BadParameter(str(exc)) from exc
        root = models_dir or str(wh.path.parent / "models")
        dataset_id = dataset or choose(teacher_datasets(wh, teacher), "dataset", teacher)
        if launch is not None:
            planned = plan_sft_version(wh, dataset_id, settings, root, new_run_id(), parent_version)
            version = launched(wh, planned, launch)
        else:
            with training_progress("SFT steps", ("loss", "eval_loss")) as on_log:
                version = train_sft_version(wh, dataset_id, settings, root, new_run_id(), on_log=on_log,
                                            parent_version=parent_version)
    print_version(version)


SEED_HELP = ("The trainer's seed (data order, sampled rollouts): another seed is a replicate, its own model version "
             "[default: 0].")
LAUNCH_HELP = ("Train in child processes started by this command, e.g. 'accelerate launch --config_file "
               "configs/accelerate/zero3.yaml' ('' : one child process); the warehouse stays in this process.")


def launched(wh: Warehouse, planned: ModelVersion | TrainingJob, launch: str) -> ModelVersion:
    """The stored version, or the planned job trained by ``launch`` and stored."""
    if isinstance(planned, ModelVersion):
        return planned
    from evoharness.training.job_runner import launch_job

    wh.release()
    return store_training_result(wh, planned, launch_job(planned, launch))


def grpo_command(
    teacher: Annotated[str, typer.Option(help="Teacher whose SFT student to start from.")] = "expert",
    parent_version: Annotated[str | None, typer.Option(help="SFT version to start from [default: the "
                                                             "teacher's latest].")] = None,
    games_per_step: Annotated[int | None, typer.Option(help="Train games per optimizer step.")] = None,
    num_generations: Annotated[int | None, typer.Option(help="Episodes per game (the GRPO group).")] = None,
    games_limit: Annotated[int | None, typer.Option(help="Train games to draw from [default: all].")] = None,
    curriculum_from: Annotated[str | None, typer.Option(help="Draw only the train games this policy (a model version, "
                                                        "or '<version>.no-repeat') played at the episode budget "
                                                        "and never won; replaces --games-limit.")] = None,
    max_steps: Annotated[int | None, typer.Option(help="Stop after this many optimizer steps.")] = None,
    learning_rate: Annotated[float | None, typer.Option(help="[default: preset]")] = None,
    episode_steps: Annotated[int | None, typer.Option(help="Step budget per episode.")] = None,
    max_new_tokens: Annotated[int | None, typer.Option(help="Completion tokens per turn.")] = None,
    call_cost: Annotated[float | None, typer.Option(help="λ_call per harness call [default: 0].")] = None,
    repeat_cap: Annotated[int | None, typer.Option(help="Repeats the repeat penalty counts at most [default: 10, "
                                                        "the paper's].")] = None,
    temperature: Annotated[float | None, typer.Option(help="Sampling temperature of the rollouts "
                                                           "[default: 1.0].")] = None,
    scale_rewards: Annotated[str | None, typer.Option(help="Divide centred rewards by the group's std (group), "
                                                           "the batch's (batch) or nothing (none) [default: "
                                                           "preset].")] = None,
    lora_r: Annotated[int | None, typer.Option(help="LoRA rank, alpha = 2r [default: full fine-tuning].")] = None,
    forced_tokens_in_loss: Annotated[bool, typer.Option(help="Also score the tokens constrained decoding forced "
                                                             "(the behaviour before 2026-12-02) [default: only "
                                                             "tokens that were a choice].")] = False,
    avoid_repeats: Annotated[bool, typer.Option(help="Rollouts leave out environment commands already issued in "
                                                     "the same state (as `evaluate --avoid-repeats`).")] = False,
    guided_per_group: Annotated[int | None, typer.Option(help="Episodes of each group that decode without repeats, "
                                                              "the rest as the policy samples: a guided win against "
                                                              "the policy's own loop is the group's contrast "
                                                              "[default: 0].")] = None,
    episode_level_loss: Annotated[bool | None, typer.Option(help="Weigh every episode equally in the loss, or (no-) "
                                                                 "every scored token [default: preset: episodes for "
                                                                 "small, tokens otherwise].")] = None,
    per_device_train_batch_size: Annotated[int | None, typer.Option(help="Turn samples per forward pass "
                                                                         "[default: 8].")] = None,
    save_steps: Annotated[int | None, typer.Option(help="Checkpoint every N steps; a rerun resumes "
                                                        "[default: 10].")] = None,
    vllm_server_url: Annotated[str | None, typer.Option(help="Generate rollouts on a `trl vllm-serve` server "
                                                             "(GPU) [default: in-process generate].")] = None,
    seed: Annotated[int | None, typer.Option(help=SEED_HELP)] = None,
    models_dir: Annotated[str | None, typer.Option(help="[default: <warehouse folder>/models]")] = None,
    launch: Annotated[str | None, typer.Option(help=LAUNCH_HELP)] = None,
    db: DbOption = None,
) -> None:
    """GRPO from an SFT model version: multi-turn rollouts in the environment with the cost-aware reward.
    With --launch it trains under `accelerate launch` (see configs/accelerate)."""
    with Warehouse(db or default_db_path()) as wh:
        parent = parent_version or choose(teacher_sft_versions(wh, teacher), "SFT version", teacher)
        base = wh.scalar("SELECT base_model FROM model_versions WHERE model_version = ?", [parent])
        settings = GRPOSettings.for_base(base, call_cost=call_cost, repeat_cap=repeat_cap, lora_r=lora_r,
                                         games_per_step=games_per_step, num_generations=num_generations, games_limit=games_limit,
                                         max_steps=max_steps, learning_rate=learning_rate,
                                         episode_steps=episode_steps, max_new_tokens=max_new_tokens,
                                         temperature=temperature, scale_rewards=scale_rewards,
                                         forced_tokens_in_loss=forced_tokens_in_loss or None,
                                         avoid_repeats=avoid_repeats or None, guided_per_group=guided_per_group,
                                         episode_level_loss=episode_level_loss,
                                         per_device_train_batch_size=per_device_train_batch_size,
                                         save_steps=save_steps, vllm_server_url=vllm_server_url, seed=seed)
        if curriculum_from is not None:
            try:
                settings = with_curriculum(wh, settings, curriculum_from)
            except LookupError as exc:
                raise typer.BadParameter(str(exc), param_hint="--curriculum-from") from exc
        root = models_dir or str(wh.path.parent / "models")
        if launch is not None:
            version = launched(wh, plan_grpo_version(wh, parent, settings, root, new_run_id()), launch)
        else:
            with training_progress("GRPO steps", ("reward", "episode/success", "episode/harness_calls")) as on_log:
                version = train_grpo_version(wh, parent, settings, root, new_run_id(), on_log=on_log)
    print_version(version)


@contextmanager
def training_progress(label: str, shown: tuple[str, ...]) -> Iterator[LogCallback]:
    """Progress over optimizer steps showing the latest values of ``shown``: a bar on a terminal, else a line
    with step, rate and ETA (so a long run in a log or a pipe is never silent until it ends)."""
    quiet_third_party()
    latest: dict[str, float] = {}
    with progress_reporter(label, unit="steps", every_s=30.0) as update:

        def on_log(logs: dict[str, float], step: int, max_steps: int) -> None:
            latest.update({k: logs[k] for k in shown if k in logs})
            update(step, max_steps or None, " ".join(f"{k} {v:.3f}" for k, v in latest.items()))

        yield on_log


def print_version(version: ModelVersion) -> None:
    print_table(f"{version.model_version}{' (stored, reused)' if version.reused else ''} at {version.path}",
                ["field", "value"], list(version.summary().items()))


def evaluate_command(
    model_version: Annotated[str, typer.Option(help="A trained model version (see the model_versions table).")],
    split: Annotated[list[str] | None, typer.Option(help="Evaluation split (repeatable). [default: valid_seen "
                                                          "and valid_unseen]")] = None,
    limit: Annotated[int | None, typer.Option(help="First N games per split [default: the full split].")] = None,
    mode: Annotated[Mode | None, typer.Option(help="bpe or react [default: the mode the student trained in].")] \
        = None,
    max_steps: Annotated[int, typer.Option(help="Step budget per episode.")] = 70,
    max_tokens: Annotated[int, typer.Option(help="Completion tokens per turn.")] = 128,
    concurrency: Annotated[int, typer.Option(help="Episodes in flight (their turns generate as one batch).")] = 16,
    constrain_actions: Annotated[bool, typer.Option(help="Decode actions constrained to admissible commands and "
                                                         "meta-actions.")] = True,
    avoid_repeats: Annotated[bool, typer.Option(help="Also leave out environment commands already issued in the "
                                                     "same state: observation and admissible commands (episodes "
                                                     "stored as the policy '<version>.no-repeat').")] = False,
    engine: Annotated[str | None, typer.Option(help="textworld or fast (default: the library default).")] = None,
    serve_url: Annotated[str | None, typer.Option(help="OpenAI-compatible server serving the version (vllm serve, "
                                                       "SGLang, TGI), e.g. http://host:8000/v1 [default: play "
                                                       "in this process].")] = None,
    served_model: Annotated[str | None, typer.Option(help="Model name on that server [default: the model "
                                                          "version id].")] = None,
    db: DbOption = None,
) -> None:
    """Play a model version on the evaluation splits (resumable) and print it beside its teacher."""
    try:
        config = EvaluationConfig(model_version=model_version, splits=tuple(split or EVAL_SPLITS), limit=limit,
                                  mode=mode, max_steps=max_steps, max_tokens=max_tokens, concurrency=concurrency,
                                  engine=engine, constrain_actions=constrain_actions, avoid_repeats=avoid_repeats,
                                  serve_url=serve_url, served_model=served_model)
    except ValidationError as exc:
        raise typer.BadParameter(validation_message(exc)) from None
    quiet_third_party()
    with Warehouse(db or default_db_path()) as wh, progress_reporter(f"{config.policy} evaluation") as update:

        def on_progress(split_name: str, done: int, total: int, record: object) -> None:
            update(done, total, split_name)

        try:
            result = evaluate(wh, config, new_run_id(), on_progress=on_progress)
        except LookupError as exc:
            raise typer.BadParameter(str(exc)) from exc
    print_table(f"{result.policy} ({result.mode.value}) beside its teacher", result.columns, result.rows)


def compare_command(
    policy: Annotated[str, typer.Argument(help="A policy: a model version, '<version>.no-repeat', a teacher.")],
    baseline: Annotated[str, typer.Argument(help="The policy it is compared with (e.g. its parent version).")],
    max_steps: Annotated[int, typer.Option(help="Step budget both played at.")] = 70,
    db: DbOption = None,
) -> None:
    """Two policies game by game on the games both played: how many only one of them won, the success gain and
    the exact McNemar p of that split."""
    with Warehouse(db or default_db_path(), read_only=True) as wh:
        outcomes = paired_outcomes(wh, policy, baseline, max_steps)
    if not outcomes:
        raise typer.BadParameter(f"{policy!r} and {baseline!r} played no game to the end at {max_steps} steps in "
                                 f"common (see `evoharness evaluate`)")
    print_table(f"{policy} against {baseline} ({max_steps} steps), game by game", list(PairedOutcome.COLUMNS),
                [o.row() for o in outcomes])


def relabel_command(
    model_version: Annotated[str, typer.Option(help="The student that plays (a trained model version).")],
    dataset: Annotated[str | None, typer.Option(help="Base dataset the labelled states are added to [default: "
                                                     "the one the student was trained on].")] = None,
    limit: Annotated[int | None, typer.Option(help="First N train games [default: all].")] = None,
    seeds: Annotated[list[int] | None, typer.Option("--seed", help="Seed per game (repeatable) [default: 0].")] = None,
    max_steps: Annotated[int, typer.Option(help="Step budget per episode.")] = 70,
    max_tokens: Annotated[int, typer.Option(help="Completion tokens per turn.")] = 128,
    labels: Annotated[LabelMode, typer.Option(help="env: the expert's environment command where the student acted "
                                                   "in the environment; turn: the scripted expert's whole turn "
                                                   "everywhere.")] = "env",
    concurrency: Annotated[int, typer.Option(help="Episodes in flight (their turns generate as one batch).")] = 16,
    db: DbOption = None,
) -> None:
    """DAgger: the student plays train games, the expert labels every state it reaches, and the labelled states
    join its training dataset as a new, relabelled dataset (resumable; train it with `sft --parent-version`)."""
    config = RelabelConfig(model_version=model_version, limit=limit, seeds=tuple(seeds or (0,)),
                           max_steps=max_steps, max_tokens=max_tokens, labels=labels, concurrency=concurrency)
    quiet_third_party()
    run_id = new_run_id()
    with Warehouse(db or default_db_path()) as wh:
        base = dataset or wh.scalar("SELECT dataset_id FROM model_versions WHERE model_version = ?", [model_version])
        with progress_reporter(f"{model_version} relabelling") as update:
            try:
                collected = collect_expert_labels(wh, config, run_id,
                                                  on_progress=lambda done, total, record: update(done, total, ""))
            except LookupError as exc:
                raise typer.BadParameter(str(exc)) from exc
        result = curate_relabelled(wh, base, model_version, run_id)
    print_table(f"relabelled dataset {result.dataset_id}{' (stored, reused)' if result.reused else ''}",
                ["field", "value"], [("episodes played", len(collected.records)), ("won", collected.won),
                                     ("base dataset", base), ("train examples", result.n_train),
                                     ("validation examples", result.n_validation),
                                     ("left out", json.dumps(result.dropped)), ("path", result.path)])
    console.print(f"next: evoharness sft --parent-version {model_version} --dataset {result.dataset_id}")
