"""DAgger in the graph: ``relabelled_dataset`` (the teacher's SFT student plays train games while the expert
labels every state it reaches; the labelled states join the student's dataset as a relabelled dataset) and
``relabelled_student`` (SFT going on from the student's weights on that dataset). Inputs by id from the
upstream materialization of the same partition. Not part of ``distill_teacher``: materialize them when a
student should learn from its own mistakes; the new version gets its evaluation run from the sensor."""



import dagster as dg
from pydantic import Field

from assets.lineage import ASSET_CODE_VERSION, id_metadata, required_upstream
from assets.training import sft_version_metadata, trained
from evoharness.curation.relabelled import curate_relabelled
from evoharness.reporting.charts import markdown_table
from evoharness.stage_config import defaults
from evoharness.training.model_versions import continued_sft_settings, plan_sft_version
from evoharness.training.relabel import RelabelConfig, collect_expert_labels
from pipelines.partitions import teacher_partitions
from pipelines.resources import AlfworldResource, StudentResource, TrainingLauncher, WarehouseResource

DEFAULTS = defaults(RelabelConfig)  # the one declaration of the defaults: training.relabel


class RelabelRunConfig(dg.Config):
    """Run config of the relabelling (defaults: RelabelConfig — every train game, seed 0, greedy)."""

    model_version: str | None = Field(default=None, description="The student that plays (None: the one "
                                      "sft_student materialized for this partition).")
    limit: int | None = Field(default=DEFAULTS["limit"], description="First N train games (None: all).")
    seeds: list[int] = Field(default=DEFAULTS["seeds"], description="Seeds per game.")
    max_steps: int = Field(default=DEFAULTS["max_steps"], description="Step budget per episode.")
    max_tokens: int = Field(default=DEFAULTS["max_tokens"], description="Completion tokens per turn.")
    temperature: float | None = Field(default=DEFAULTS["temperature"], description="None: greedy.")
    labels: str = Field(default=DEFAULTS["labels"], description="env: the expert's environment command where the "
                        "student acted in the environment; turn: the scripted expert's whole turn everywhere.")
    concurrency: int = Field(default=DEFAULTS["concurrency"], description="Episodes in flight (their turns "
                             "generate as one batch).")
    engine: str | None = Field(default=DEFAULTS["engine"], description="textworld or fast (None: library default).")


@dg.asset(
    partitions_def=teacher_partitions,
    deps=["sft_student"],
    group_name="training",
    code_version=ASSET_CODE_VERSION,
    kinds={"pytorch", "duckdb"},
    description="DAgger's aggregate: the SFT student plays train games, the expert labels every state it reaches, "
                "and the labelled states join the student's dataset as <name>.relabel@vN (resumable).",
)
def relabelled_dataset(context: dg.AssetExecutionContext, config: RelabelRunConfig, alfworld: AlfworldResource,
                       warehouse: WarehouseResource) -> dg.MaterializeResult:
    model_version = required_upstream(context, "sft_student", "model_version", config.model_version)
    relabel = RelabelConfig(model_version=model_version, data_root=alfworld.root(),
                            **config.model_dump(exclude={"model_version", "seeds"}), seeds=tuple(config.seeds))

    def on_progress(done: int, total: int, record) -> None:  # type: ignore[no-untyped-def]
        context.log.info("relabelled episode %d/%d %s %s (%d turns)", done, total, record.spec.game.game_id,
                         "won" if record.won else record.status, len(record.steps))

    with warehouse.open() as wh:
        base = wh.scalar("SELECT dataset_id FROM model_versions WHERE model_version = ?", [model_version])
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


class RelabelledSFTRunConfig(dg.Config):
    """Run config of SFT going on from the student's weights (unset fields keep the parent's settings)."""

    dataset_id: str | None = Field(default=None, description="Relabelled dataset (None: the one relabelled_dataset "
                                   "materialized for this partition).")
    learning_rate: float | None = None
    epochs: float | None = Field(default=None, description="Passes over the relabelled dataset's training split.")
    max_steps: int | None = Field(default=None, description="Stop after this many optimizer steps.")
    logging_steps: int | None = Field(default=None, description="Log the loss every N steps.")


@dg.asset(
    partitions_def=teacher_partitions,
    deps=["relabelled_dataset"],
    group_name="training",
    code_version=ASSET_CODE_VERSION,
    kinds={"pytorch", "duckdb"},
    description="SFT from the student that played, on its relabelled dataset, with its settings (parent_version "
                "names it); a new model version, evaluated like any other.",
    check_specs=[dg.AssetCheckSpec(
        "relabelled_student_learned", asset="relabelled_student", blocking=True,
        description="The student learned: its mean training loss over the last third of the logged steps is below "
                    "the mean over the first third (batches mix the parent's known turns with new labelled states, so "
                    "single losses jump).")],
)
def relabelled_student(context: dg.AssetExecutionContext, config: RelabelledSFTRunConfig,
                       warehouse: WarehouseResource, students: StudentResource, training: TrainingLauncher,
                       pipes_client: dg.PipesSubprocessClient) -> dg.MaterializeResult:
    dataset_id = required_upstream(context, "relabelled_dataset", "dataset_id", config.dataset_id)
    with warehouse.open() as wh:
        parent = wh.scalar("SELECT config->>'relabelled_by' FROM datasets WHERE dataset_id = ?", [dataset_id])
        if parent is None:
            raise dg.Failure(f"Dataset {dataset_id!r} is not a relabelled dataset (its config names no student).")
        settings = continued_sft_settings(wh, parent, **config.model_dump(exclude={"dataset_id"}))
        planned = plan_sft_version(wh, dataset_id, settings, students.models_root(wh), context.run.run_id, parent)
    version = trained(context, warehouse, training, pipes_client, planned)
    metadata = sft_version_metadata(context, version, f"{version.model_version}: SFT loss from {parent}")
    return dg.MaterializeResult(metadata=metadata, check_results=[learned_by_thirds(version.row["loss_history"])])


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
