"""Students as model versions, trained as the recipe says (``configs/recipes``; the ``students`` resource names the
deployment's recipe, a run config may name another): ``sft_student`` (TRL SFT on the dataset ``sft_dataset``
materialized), ``grpo_curriculum`` (the greedy play on train games of the SFT student, or of the DAgger student
of :mod:`assets.relabelling` where the recipe has a round; the games it lost are metadata) and ``grpo_student`` (TRL
GRPO from that student with multi-turn rollouts on those games), inputs named by id.

Training runs in a child process launched through Dagster Pipes (the ``training`` and ``pipes_client``
resources) by the library's one realize path (:func:`evoharness.training.realize.realize`): this process plans the
job and stores the model version, and never imports torch; the child streams its progress and writes its result."""


import functools

import dagster as dg
from pydantic import Field

from assets.failures import one_line_failures
from assets.lineage import ASSET_CODE_VERSION, id_metadata, required_upstream, upstream_value
from assets.settings_config import RecipeRunConfig, with_settings_fields
from evoharness.errors import MissingInputError
from evoharness.evaluation.run import EvaluationResult
from evoharness.reporting.charts import line_chart_png, markdown_image, markdown_table
from evoharness.reporting.training_curves import grpo_curve_table, grpo_curves_png, peak_kl
from evoharness.training.curriculum import play_curriculum, with_curriculum
from evoharness.training.grpo_config import GRPOSettings
from evoharness.training.model_versions import (
    ModelVersion,
    plan_grpo_version,
    plan_sft_version,
)
from evoharness.training.realize import realize
from evoharness.training.recipes import Recipe
from evoharness.training.sft_config import SFTSettings
from pipelines.partitions import register_model_version, teacher_partitions
from pipelines.resources import AlfworldResource, StudentResource, TrainingLauncher, WarehouseResource
from warehouse import Warehouse


@with_settings_fields("sft", SFTSettings)
class SFTRunConfig(RecipeRunConfig):
    """Run config of a student's SFT."""

    dataset_id: str | None = Field(default=None, description="Dataset to train on (None: the one sft_dataset "
                                   "materialized for this partition, read from its metadata).")



training_asset = functools.partial(dg.asset, partitions_def=teacher_partitions, group_name="training",
                                   code_version=ASSET_CODE_VERSION, kinds={"pytorch", "duckdb"})
"""``dg.asset`` for a teacher's training stage: partitioned by teacher, in the training group."""


def recipe_metadata(recipe: Recipe) -> dict[str, dg.MetadataValue]:
    """The recipe a training ran, as shown on its asset."""
    return id_metadata(recipe.stamp() | {"recipe_overrides": list(recipe.overrides) or None})


@training_asset(
    deps=["sft_dataset"],
    description="SFT student of the dataset sft_dataset materialized for this teacher, trained as the recipe's sft "
                "section says (TRL SFTTrainer, loss on the assistant turn); one model version per (dataset, "
                "settings), reused when asked again.",
    check_specs=[dg.AssetCheckSpec(
        "sft_student_learned", asset="sft_student", blocking=True,
        description="The student learned: its last loss (validation if held out, else training) is below the first "
                    "logged training loss.")],
)
@one_line_failures
def sft_student(context: dg.AssetExecutionContext, config: SFTRunConfig, warehouse: WarehouseResource,
                students: StudentResource, training: TrainingLauncher,
                pipes_client: dg.PipesSubprocessClient) -> dg.MaterializeResult:
    recipe = config.load(students.recipe_name())
    dataset_id = required_upstream(context, "sft_dataset", "dataset_id", config.dataset_id)
    run_id = context.run.run_id
    with warehouse.open() as wh:
        version = realize(wh, lambda w: plan_sft_version(w, dataset_id, recipe.sft, students.models_root(w), run_id,
                                                         recipe=recipe.stamp()), training.runner(context, pipes_client))
    metadata = sft_version_metadata(context, version, f"{version.model_version}: SFT loss") | recipe_metadata(recipe)
    return dg.MaterializeResult(metadata=metadata, check_results=[learned_check(version)])


def sft_version_metadata(context: dg.AssetExecutionContext, version: ModelVersion, title: str
                         ) -> dict[str, dg.MetadataValue]:
    """Register an SFT version's partition (its evaluation follows) and its metadata with the loss curve."""
    register_model_version(context.instance, version.model_version)
    chart = line_chart_png({"train loss": version.row["loss_history"], "validation loss": version.row["eval_history"]},
                           title, "optimizer step", "loss")
    return version_metadata(version) | {"loss_curve": dg.MetadataValue.md(markdown_image(chart, "SFT loss"))}


def version_metadata(version: ModelVersion) -> dict[str, dg.MetadataValue]:
    """Metadata every model-version asset attaches: the id, where it is, and its headline numbers."""
    summary = version.summary()
    metadata: dict[str, dg.MetadataValue] = {
        "model_version": dg.MetadataValue.text(version.model_version),
        "path": dg.MetadataValue.path(version.path),
        "reused_stored_version": dg.MetadataValue.bool(version.reused),
        "steps": dg.MetadataValue.int(summary["steps"]),
        "parameters": dg.MetadataValue.int(summary["parameters"]),
        "summary": dg.MetadataValue.md(markdown_table(["field", "value"], list(summary.items()))),
    } | id_metadata({key: version.row.get(key) for key in ("teacher", "dataset_id", "parent_version", "base_model",
                                                             "code_version", "run_id")})
    for key in ("train_loss", "eval_loss"):
        if summary[key] is not None:
            metadata[key] = dg.MetadataValue.float(summary[key])
    return metadata


def learned_check(version: ModelVersion) -> dg.AssetCheckResult:
    """Passes when the final loss (validation if any, else training) is below the first training loss."""
    losses = version.row["loss_history"]
    first = losses[0][1] if losses else None
    last = version.row["eval_loss"] if version.row["eval_loss"] is not None else version.row["train_loss"]
    passed = first is not None and last is not None and last < first
    metadata = {"first_train_loss": first, "final_loss": last}
    return dg.AssetCheckResult(check_name="sft_student_learned", passed=passed,
                               metadata={k: dg.MetadataValue.float(v) for k, v in metadata.items() if v is not None})


@with_settings_fields("grpo", GRPOSettings)
class GRPORunConfig(RecipeRunConfig):
    """Run config of a student's curriculum and GRPO."""

    parent_version: str | None = Field(default=None, description="Model version to start from (None: the one "
                                       "relabelled_student materialized for this partition where the recipe has a "
                                       "dagger round, else sft_student's, read from its metadata).")
    curriculum_from: str | None = Field(default=None, description="Draw only the train games this policy lost (None: "
                                        "grpo_curriculum's games, or every train game when the recipe has none).")
    engine: str | None = Field(default=None, description="Rollout engine (None: the fast engine).")
    kl_warning: float = Field(default=1.0, gt=0, description=(
        "The grpo_stayed_near_parent check warns when a step's KL to the parent exceeded this (the runs that lost "
        "held-out games drifted past it: docs/results.md, guided GRPO). Not a training setting."))



def grpo_parent(context: dg.AssetExecutionContext, recipe: Recipe, explicit: str | None) -> str:
    """The version GRPO starts from: ``explicit``, else the DAgger student where the recipe has a round, else the
    SFT student (each as materialized for this partition)."""
    upstream = "sft_student" if recipe.dagger is None else "relabelled_student"
    return required_upstream(context, upstream, "model_version", explicit)


@training_asset(
    deps=["sft_student", "relabelled_student"],
    description="The SFT student's (the DAgger student's, where the recipe has a round) greedy play on the recipe's "
                "first train games at GRPO's episode budget; the games it lost are GRPO's curriculum (metadata). "
                "Resumable; nothing to play when the recipe has no curriculum.",
    check_specs=[dg.AssetCheckSpec(
        "grpo_curriculum_has_games", asset="grpo_curriculum", blocking=True,
        description="The student lost some of the games (GRPO needs games where its episodes differ), or the recipe "
                    "has no curriculum.")],
)
@one_line_failures
def grpo_curriculum(context: dg.AssetExecutionContext, config: GRPORunConfig, alfworld: AlfworldResource,
                    warehouse: WarehouseResource, students: StudentResource) -> dg.MaterializeResult:
    recipe = config.load(students.recipe_name())
    parent = grpo_parent(context, recipe, config.parent_version)
    metadata = {"played_by": dg.MetadataValue.text(parent)} | recipe_metadata(recipe)
    if recipe.curriculum is None:
        check = dg.AssetCheckResult(check_name="grpo_curriculum_has_games", passed=True,
                                    metadata={"curriculum": dg.MetadataValue.text("none in the recipe")})
        return dg.MaterializeResult(metadata=metadata, check_results=[check])

    def on_progress(split: str, done: int, total: int, record) -> None:  # type: ignore[no-untyped-def]
        if done == total or done % 20 == 0:
            context.log.info("curriculum %d/%d games", done, total)

    with warehouse.open() as wh:
        played = play_curriculum(wh, parent, recipe.curriculum, recipe.grpo, context.run.run_id,
                                 data_root=alfworld.root(), on_progress=on_progress)
        lost = curriculum_games(wh, recipe, parent, alfworld.root())
    metadata |= curriculum_metadata(played, lost)
    check = dg.AssetCheckResult(check_name="grpo_curriculum_has_games", passed=bool(lost),
                                metadata={"lost_games": dg.MetadataValue.int(len(lost))})
    return dg.MaterializeResult(metadata=metadata, check_results=[check])


def curriculum_games(wh: Warehouse, recipe: Recipe, parent: str, data_root: str | None) -> list[str]:
    """The train games ``parent`` lost at GRPO's budget among the curriculum's (empty when it lost none)."""
    limit = recipe.curriculum.limit if recipe.curriculum is not None else None
    try:
        return list(with_curriculum(wh, recipe.grpo, parent, data_root, limit).games or [])
    except MissingInputError:
        return []


def curriculum_metadata(played: EvaluationResult, lost: list[str]) -> dict[str, dg.MetadataValue]:
    rate = played.success_rate("train")
    return {"lost_games": dg.MetadataValue.json(lost), "lost_game_count": dg.MetadataValue.int(len(lost)),
            "evaluation": dg.MetadataValue.md(markdown_table(played.columns, played.rows))} | (
        {"success_rate_train": dg.MetadataValue.float(rate)} if rate is not None else {})


@training_asset(
    deps=["sft_student", "relabelled_student", "grpo_curriculum"],
    description="GRPO from the teacher's SFT student (its DAgger student, where the recipe has a round) as the "
                "recipe's grpo section says, on grpo_curriculum's games: multi-turn rollouts in the environment, "
                "cost-aware reward (each term logged), one sample per turn with its trajectory's group-normalized "
                "advantage.",
    check_specs=[dg.AssetCheckSpec(
        "grpo_rollouts_healthy", asset="grpo_student", blocking=True,
        description="Every logged step played its rollouts without a failed episode."),
        dg.AssetCheckSpec(
            "grpo_stayed_near_parent", asset="grpo_student",
            description="No logged step's KL to the parent exceeded the run config's kl_warning (a warning: "
                        "play on the held-out splits is the judge).")],
)
@one_line_failures
def grpo_student(context: dg.AssetExecutionContext, config: GRPORunConfig, alfworld: AlfworldResource,
                 warehouse: WarehouseResource, students: StudentResource, training: TrainingLauncher,
                 pipes_client: dg.PipesSubprocessClient) -> dg.MaterializeResult:
    recipe = config.load(students.recipe_name())
    parent = grpo_parent(context, recipe, config.parent_version)
    run_id = context.run.run_id
    with warehouse.open() as wh:
        if config.curriculum_from is not None:
            settings = with_curriculum(wh, recipe.grpo, config.curriculum_from, alfworld.root())
        elif recipe.curriculum is not None:  # the games grpo_curriculum found lost, by id
            lost = upstream_value(context, "grpo_curriculum", "lost_games")
            if not lost:
                raise dg.Failure(f"No curriculum games for partition {context.partition_key!r}: materialize "
                                 "grpo_curriculum first (its check fails when the student lost no game).",
                                 allow_retries=False)
            settings = GRPOSettings.model_validate(recipe.grpo.model_dump() | {
                "games": list(lost), "games_from": parent, "games_limit": None})
        else:
            settings = recipe.grpo
        version = realize(wh, lambda w: plan_grpo_version(
            w, parent, settings, students.models_root(w), run_id, data_root=alfworld.root(), engine=config.engine,
            recipe=recipe.stamp()), training.runner(context, pipes_client))
    register_model_version(context.instance, version.model_version)
    history = version.row["rollout_history"] or []
    metadata = version_metadata(version) | {"parent_version": dg.MetadataValue.text(parent)} | grpo_curves(version) \
        | recipe_metadata(recipe)
    failed = [h.get("episode/failed", 0.0) for h in history]
    check = dg.AssetCheckResult(check_name="grpo_rollouts_healthy", passed=bool(history) and not any(failed),
                                metadata={"logged_steps": dg.MetadataValue.int(len(history)),
                                          "max_failed_share": dg.MetadataValue.float(max(failed, default=0.0))})
    return dg.MaterializeResult(metadata=metadata, check_results=[check, kl_check(history, config.kl_warning)])


def kl_check(history: list[dict], limit: float) -> dg.AssetCheckResult:
    """Warns when the run moved far from its parent; passes when no step logged a KL (β = 0)."""
    peak = peak_kl(history)
    metadata = {"kl_warning": dg.MetadataValue.float(limit)} | (
        {"peak_kl": dg.MetadataValue.float(peak)} if peak is not None else {})
    return dg.AssetCheckResult(check_name="grpo_stayed_near_parent", passed=peak is None or peak <= limit,
                               severity=dg.AssetCheckSeverity.WARN, metadata=metadata)


def grpo_curves(version: ModelVersion) -> dict[str, dg.MetadataValue]:
    """The harness-annealing plot and table of a GRPO version (success, harness calls per episode and reward
    terms by step); empty for other versions."""
    history = version.row.get("rollout_history") or []
    if not history:
        return {}
    columns, rows = grpo_curve_table(history)
    return {"rollout_curves": dg.MetadataValue.md(markdown_image(grpo_curves_png(version.model_version, history),
                                                                 "GRPO by step")),
            "rollout_curve_table": dg.MetadataValue.md(markdown_table(columns, rows))}
