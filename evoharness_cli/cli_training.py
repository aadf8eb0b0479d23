"""``evoharness sft | dagger | grpo | relabel``: train student model versions from a recipe, and relabel the states
they reach with the expert (DAgger)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Annotated, Any

import typer

from evoharness.curation.relabelled import curate_relabelled
from evoharness.lineage import new_run_id
from evoharness.training.curriculum import play_curriculum, with_curriculum
from evoharness.training.grpo_config import GRPOSettings
from evoharness.training.model_versions import (
    ModelVersion,
    continued_sft_settings,
    plan_grpo_version,
    plan_sft_version,
    required_version,
    teacher_datasets,
    teacher_sft_versions,
)
from evoharness.training.realize import InProcess, JobRunner, Launched, realize
from evoharness.training.recipes import Recipe, load_recipe
from evoharness.training.relabel import RelabelConfig, RelabelSettings, collect_expert_labels
from evoharness.training.sft_config import SFTSettings
from evoharness.training.trainer_utils import LogCallback
from evoharness_cli.cli_common import DbOption, console, print_table, progress_reporter, quiet_third_party
from evoharness_cli.settings_options import DEFAULT, RecipeOption, SetOption, with_settings_options
from warehouse import Warehouse, default_db_path

LaunchOption = Annotated[str | None, typer.Option(help=(
    "Train in child processes started by this command, e.g. 'accelerate launch --config_file "
    "configs/accelerate/multi_cpu.yaml' ('': one child process); the warehouse stays in this process."))]
ModelsDirOption = Annotated[str | None, typer.Option(help="[default: <warehouse folder>/models]")]
BaseDatasetOption = Annotated[str | None, typer.Option(help="Base dataset the labelled states are added to [default: "
                                                            "the one the student was trained on].")]


def choose(ids: list[str], what: str, owner: str) -> str:
    """The first (newest) of ``ids``, said out loud, or a clear error when there is none."""
    if not ids:
        raise typer.BadParameter(f"no {what} for teacher {owner!r} yet")
    console.print(f"{what}: {ids[0]} (the teacher's latest; choose another by id)")
    return ids[0]


@with_settings_options("sft", SFTSettings)
def sft_command(
    teacher: Annotated[str, typer.Option(help="Teacher whose latest curated dataset to train on (see --dataset).")
                       ] = "expert",
    dataset: Annotated[str | None, typer.Option(help="Dataset id to train on (e.g. sft@v2) [default: the "
                                                     "teacher's latest].")] = None,
    parent_version: Annotated[str | None, typer.Option(help="Go on training this model version's weights with its "
                                                            "settings (e.g. on its relabelled dataset); the recipe's "
                                                            "sft section is not used, only --set/options.")] = None,
    recipe: RecipeOption = DEFAULT,
    set_: SetOption = None,
    models_dir: ModelsDirOption = None,
    launch: LaunchOption = None,
    db: DbOption = None,
    values: dict[str, Any] | None = None,
) -> None:
    """Fine-tune a student with TRL (SFT) as the recipe says and record it as a model version (same dataset +
    settings: reused)."""
    chosen = load_recipe(recipe, set_ or (), values)
    with Warehouse(db or default_db_path()) as wh, _runner(launch, "SFT steps", ("loss", "eval_loss")) as train:
        dataset_id = dataset or choose(teacher_datasets(wh, teacher), "dataset", teacher)
        settings = chosen.sft if parent_version is None else continued_sft_settings(
            wh, parent_version, **chosen.given("sft"))
        root, run_id = models_dir or str(wh.path.parent / "models"), new_run_id()
        version = realize(wh, lambda w: plan_sft_version(w, dataset_id, settings, root, run_id, parent_version,
                                                         chosen.stamp()), train)
    print_version(version)


@with_settings_options("grpo", GRPOSettings)
def grpo_command(
    teacher: Annotated[str, typer.Option(help="Teacher whose latest SFT student to start from.")] = "expert",
    parent_version: Annotated[str | None, typer.Option(help="Model version to start from [default: the teacher's "
                                                             "latest SFT version].")] = None,
    curriculum_from: Annotated[str | None, typer.Option(help="Draw only the train games this policy (a model version, "
                                                        "or '<version>.no-repeat') played at the episode budget and "
                                                        "never won [default: the recipe's curriculum: the parent's "
                                                        "greedy play on its first train games, played first].")] = None,
    engine: Annotated[str | None, typer.Option(help="Rollout engine: textworld or fast [default: fast].")] = None,
    recipe: RecipeOption = DEFAULT,
    set_: SetOption = None,
    models_dir: ModelsDirOption = None,
    launch: LaunchOption = None,
    db: DbOption = None,
    values: dict[str, Any] | None = None,
) -> None:
    """GRPO from a model version as the recipe says: its curriculum (the parent's lost train games), then multi-turn
    rollouts in the environment with the cost-aware reward. With --launch it trains under `accelerate launch`."""
    chosen = load_recipe(recipe, set_ or (), values)
    quiet_third_party()
    with Warehouse(db or default_db_path()) as wh:
        parent = parent_version or choose(teacher_sft_versions(wh, teacher), "SFT version", teacher)
        required_version(wh, parent, parent=True)
        settings = grpo_settings(wh, chosen, parent, curriculum_from)
        root, run_id = models_dir or str(wh.path.parent / "models"), new_run_id()
        with _runner(launch, "GRPO steps", ("reward", "episode/success", "episode/harness_calls")) as train:
            version = realize(wh, lambda w: plan_grpo_version(w, parent, settings, root, run_id, engine=engine,
                                                              recipe=chosen.stamp()), train)
    print_version(version)


def grpo_settings(wh: Warehouse, recipe: Recipe, parent: str, curriculum_from: str | None) -> GRPOSettings:
    """The recipe's GRPO settings drawing from the curriculum: ``curriculum_from``'s lost train games, else (when
    the recipe has a curriculum) the parent's, played now if they were not played yet (resumable)."""
    if curriculum_from is not None:
        return with_curriculum(wh, recipe.grpo, curriculum_from)
    if recipe.curriculum is None:
        return recipe.grpo
    with progress_reporter(f"{parent} curriculum (train games)") as update:
        play_curriculum(wh, parent, recipe.curriculum, recipe.grpo, new_run_id(),
                        on_progress=lambda split, done, total, record: update(done, total, split))
    settings = with_curriculum(wh, recipe.grpo, parent, limit=recipe.curriculum.limit)
    console.print(f"curriculum: {parent} lost {len(settings.games or [])} of its first {recipe.curriculum.limit} "
                  "train games; GRPO draws from them")
    return settings


@contextmanager
def _runner(launch: str | None, label: str, shown: tuple[str, ...]) -> Iterator[JobRunner]:
    """``--launch``'s child processes, or this process with a progress line."""
    if launch is not None:
        yield Launched(launch)
        return
    with training_progress(label, shown) as on_log:
        yield InProcess(on_log)


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


@with_settings_options("relabel", RelabelSettings)
def relabel_command(
    model_version: Annotated[str, typer.Option(help="The student that plays (a trained model version).")],
    dataset: BaseDatasetOption = None,
    recipe: RecipeOption = DEFAULT,
    set_: SetOption = None,
    db: DbOption = None,
    values: dict[str, Any] | None = None,
) -> None:
    """DAgger's data: the student plays train games, the expert labels every state it reaches, and the labelled
    states join its training dataset as a new, relabelled dataset (resumable; `evoharness dagger` also trains on
    it)."""
    settings = load_recipe(recipe, set_ or (), values).relabel
    with Warehouse(db or default_db_path()) as wh:
        dataset_id = relabelled_dataset(wh, model_version, settings, dataset)
    console.print(f"next: evoharness sft --parent-version {model_version} --dataset {dataset_id}")


@with_settings_options("dagger", SFTSettings)
def dagger_command(
    model_version: Annotated[str, typer.Option(help="The student that plays and goes on training (an SFT version).")],
    dataset: BaseDatasetOption = None,
    recipe: RecipeOption = DEFAULT,
    set_: SetOption = None,
    models_dir: ModelsDirOption = None,
    launch: LaunchOption = None,
    db: DbOption = None,
    values: dict[str, Any] | None = None,
) -> None:
    """One DAgger round as the recipe says: the student plays train games while the expert labels the states it
    reaches (the relabel section), then SFT goes on from its weights on the relabelled dataset (the dagger section
    over the student's own settings). Resumable: played games and a trained version are reused."""
    chosen = load_recipe(recipe, set_ or (), values)
    given = chosen.dagger_given()
    with Warehouse(db or default_db_path()) as wh:
        dataset_id = relabelled_dataset(wh, model_version, chosen.relabel, dataset)
        settings = continued_sft_settings(wh, model_version, **given)
        root, run_id = models_dir or str(wh.path.parent / "models"), new_run_id()
        with _runner(launch, "SFT steps", ("loss", "eval_loss")) as train:
            version = realize(wh, lambda w: plan_sft_version(w, dataset_id, settings, root, run_id, model_version,
                                                             chosen.stamp()), train)
    print_version(version)


def relabelled_dataset(wh: Warehouse, model_version: str, settings: RelabelSettings, dataset: str | None) -> str:
    """The relabelled dataset of ``model_version``'s play as ``settings`` say (played now where it was not yet),
    added to ``dataset`` (default: the one it trained on); its id, after a table of what it holds."""
    config = RelabelConfig(model_version=model_version, **settings.model_dump())
    quiet_third_party()
    run_id = new_run_id()
    base = dataset or required_version(wh, model_version).row["dataset_id"]
    with progress_reporter(f"{model_version} relabelling") as update:
        collected = collect_expert_labels(wh, config, run_id,
                                          on_progress=lambda done, total, record: update(done, total, ""))
    result = curate_relabelled(wh, base, model_version, run_id)
    print_table(f"relabelled dataset {result.dataset_id}{' (stored, reused)' if result.reused else ''}",
                ["field", "value"], [("episodes played", len(collected.records)), ("won", collected.won),
                                     ("base dataset", base), ("train examples", result.n_train),
                                     ("validation examples", result.n_validation),
                                     ("left out", json.dumps(result.dropped)), ("path", result.path)])
    return result.dataset_id
