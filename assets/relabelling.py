"""The recipe's DAgger round in the graph: ``relabelled_dataset`` (the teacher's SFT student plays train games
while the expert labels every state it reaches; the labelled states join the student's dataset as a relabelled
dataset) and ``relabelled_student`` (SFT going on from the student's weights on that dataset, with the recipe's
dagger section over its settings). Inputs by id from the upstream materialization of the same partition. Part of
``distill_teacher``: where the recipe has a dagger section GRPO starts from the DAgger student; where it has none,
both assets record that there was no round and train nothing (a run config turns one on with a ``dagger.*``
override on both). The labels are the ALFWorld expert's, whatever the teacher; the new version gets its evaluation
run from the sensor."""



import dagster as dg
from pydantic import Field

from assets.failures import one_line_failures
from assets.lineage import id_metadata, required_upstream
from assets.settings_config import RecipeRunConfig, with_settings_fields
from assets.training import recipe_metadata, sft_version_metadata, training_asset
from evoharness.curation.relabelled import curate_relabelled
from evoharness.reporting.charts import markdown_table
from evoharness.training.model_versions import continued_sft_settings, plan_sft_version
from evoharness.training.realize import realize
from evoharness.training.recipes import Recipe
from evoharness.training.relabel import RelabelConfig, RelabelSettings, collect_expert_labels
from evoharness.training.sft_config import SFTSettings
from pipelines.resources import AlfworldResource, StudentResource, TrainingLauncher, WarehouseResource


@with_settings_fields("relabel", RelabelSettings)
class RelabelRunConfig(RecipeRunConfig):
    """Run config of the relabelling (the recipe's relabel section: which games, seeds, budget, labels)."""

    model_version: str | None = Field(default=None, description="The student that plays (None: the one sft_student "
                                      "materialized for this partition).")
    engine: str | None = Field(default=None, description="textworld or fast (None: library default).")



@training_asset(
    deps=["sft_student"],
    description="DAgger's aggregate, where the recipe has a dagger round: the SFT student plays train games as its "
                "relabel section says, the expert labels every state it reaches, and the labelled states join the "
                "student's dataset as <name>.relabel@vN (resumable).",
)
@one_line_failures
def relabelled_dataset(context: dg.AssetExecutionContext, config: RelabelRunConfig, alfworld: AlfworldResource,
                       warehouse: WarehouseResource, students: StudentResource) -> dg.MaterializeResult:
    recipe = config.load(students.recipe_name())
    if recipe.dagger is None:
        return no_round(recipe)
    model_version = required_upstream(context, "sft_student", "model_version", config.model_version)
    relabel = RelabelConfig(model_version=model_version, data_root=alfworld.root(), engine=config.engine,
                            **recipe.relabel.model_dump())

    def on_progress(done: int, total: int, record) -> None:  # type: ignore[no-untyped-def]
        context.log.info("relabelled episode %d/%d %s %s (%d turns)", done, total, record.spec.game.game_id,
                         "won" if record.won else record.status, len(record.steps))

    with warehouse.open() as wh:
        base = wh.value("model_version_dataset", model_version=model_version)
        collected = collect_expert_labels(wh, relabel, context.run.run_id, on_progress)
        result = curate_relabelled(wh, base, model_version, context.run.run_id)
        columns, rows = wh.query("expert_label_agreement", model_version=model_version)
    return dg.MaterializeResult(metadata=id_metadata({
        "dataset_id": result.dataset_id, "base_dataset_id": base, "relabelled_by": model_version,
        "run_id": context.run.run_id, "reused_stored_dataset": result.reused,
    }) | {
        "episodes_played": dg.MetadataValue.int(len(collected.records)),
        "episodes_won": dg.MetadataValue.int(collected.won),
        "n_train": dg.MetadataValue.int(result.n_train),
        "n_validation": dg.MetadataValue.int(result.n_validation),
        "left_out": dg.MetadataValue.json(result.dropped),
        "agreement_with_expert": dg.MetadataValue.md(markdown_table(columns, rows)),
        "path": dg.MetadataValue.path(result.path),
    })


@with_settings_fields("dagger", SFTSettings)
class RelabelledSFTRunConfig(RecipeRunConfig):
    """Run config of SFT going on from the student's weights (a DAgger round): the recipe's dagger section, with
    the fields set here (typed or as dagger.field overrides) over it, overrides the parent's settings."""

    dataset_id: str | None = Field(default=None, description="Relabelled dataset (None: the one relabelled_dataset "
                                   "materialized for this partition).")



@training_asset(
    deps=["relabelled_dataset"],
    description="SFT from the student that played, on its relabelled dataset, with its settings and the recipe's "
                "dagger section over them (parent_version names it); a new model version, evaluated like any other.",
    check_specs=[dg.AssetCheckSpec(
        "relabelled_student_learned", asset="relabelled_student", blocking=True,
        description="The student learned: its mean training loss over the last third of the logged steps is below "
                    "the mean over the first third (batches mix the parent's known turns with new labelled states, so "
                    "single losses jump).")],
)
@one_line_failures
def relabelled_student(context: dg.AssetExecutionContext, config: RelabelledSFTRunConfig,
                       warehouse: WarehouseResource, students: StudentResource, training: TrainingLauncher,
                       pipes_client: dg.PipesSubprocessClient) -> dg.MaterializeResult:
    recipe = config.load(students.recipe_name())
    if recipe.dagger is None:
        return no_round(recipe, dg.AssetCheckResult(check_name="relabelled_student_learned", passed=True))
    dataset_id = required_upstream(context, "relabelled_dataset", "dataset_id", config.dataset_id)
    with warehouse.open() as wh:
        parent = wh.value("dataset_relabelled_by", dataset_id=dataset_id)
        if parent is None:
            raise dg.Failure(f"Dataset {dataset_id!r} is not a relabelled dataset (its config names no student).")
        settings = continued_sft_settings(wh, parent, **recipe.dagger_given())
        run_id = context.run.run_id
        version = realize(wh, lambda w: plan_sft_version(w, dataset_id, settings, students.models_root(w), run_id,
                                                         parent, recipe.stamp()), training.runner(context, pipes_client))
    metadata = sft_version_metadata(context, version, f"{version.model_version}: SFT loss from {parent}") \
        | recipe_metadata(recipe)
    return dg.MaterializeResult(metadata=metadata, check_results=[learned_by_thirds(version.row["loss_history"])])


def no_round(recipe: Recipe, *checks: dg.AssetCheckResult) -> dg.MaterializeResult:
    """The materialization of a recipe without a DAgger round: nothing played or trained, and said so."""
    metadata: dict[str, dg.MetadataValue] = {"dagger": dg.MetadataValue.text("none in the recipe")}
    return dg.MaterializeResult(metadata=metadata | recipe_metadata(recipe), check_results=list(checks))


def learned_by_thirds(losses: list[tuple[int, float]]) -> dg.AssetCheckResult:
    """Passes when the mean logged training loss of the last third is below that of the first third."""
    third = len(losses) // 3
    first = sum(loss for _, loss in losses[:third]) / third if third else None
    last = sum(loss for _, loss in losses[-third:]) / third if third else None
    return dg.AssetCheckResult(
        check_name="relabelled_student_learned", passed=first is not None and last is not None and last < first,
        metadata={"logged_steps": dg.MetadataValue.int(len(losses))} | {
            k: dg.MetadataValue.float(v) for k, v in (("first_third_loss", first), ("last_third_loss", last))
            if v is not None})
