"""Students as model versions: ``sft_student`` (TRL SFT on the dataset that ``sft_dataset`` materialized) and
``grpo_student`` (TRL GRPO with multi-turn rollouts from that SFT version), inputs named by id.

Training runs in a child process launched through Dagster Pipes (the ``training`` resource and the
``pipes_client`` resource): this process plans the job and stores the model version from the warehouse, and
never imports torch; the child streams its progress and reports its result back."""



import dagster as dg
from pydantic import Field

from assets.lineage import ASSET_CODE_VERSION, id_metadata, required_upstream
from evoharness.reporting.charts import line_chart_png, markdown_image, markdown_table
from evoharness.reporting.training_curves import grpo_curve_table, grpo_curves_png, peak_kl
from evoharness.training.curriculum import with_curriculum
from evoharness.training.grpo import GRPOSettings
from evoharness.training.model_versions import (
    ModelVersion,
    TrainingJob,
    plan_grpo_version,
    plan_sft_version,
    store_training_result,
)
from evoharness.training.sft import SFTSettings
from evoharness.training.tiny_student import TINY
from pipelines.partitions import register_model_version, teacher_partitions
from pipelines.resources import AlfworldResource, StudentResource, TrainingLauncher, WarehouseResource


class SFTRunConfig(dg.Config):
    """Run config of a student's SFT. Unset fields take the preset of the base: the paper's LoRA settings for
    a hub model or folder, full fine-tuning with a large step for the locally built tiny student."""

    base_model: str | None = Field(default=None, description=f"Hub id (e.g. Qwen/Qwen3-8B), local folder, or {TINY!r} "
                                   "(None: the students resource's base).")
    epochs: float | None = Field(default=None, description="Passes over the training split.")
    learning_rate: float | None = None
    batch_size: int | None = Field(default=None, description="Examples per optimizer step.")
    per_device_batch_size: int | None = None
    max_length: int | None = Field(default=None, description="Tokens per example.")
    lora_r: int | None = Field(default=None, description="LoRA rank (alpha = 2r); 0: full fine-tuning.")
    max_steps: int | None = Field(default=None, description="Stop after this many optimizer steps.")
    max_tokens: int | None = Field(default=None, description="Train for about this many input tokens (sets the "
                                   "steps; an equal-compute baseline).")
    bf16: bool | None = Field(default=None, description="bf16 mixed precision (GPUs; CPUs with bf16 units).")
    seed: int = 0
    dataset_id: str | None = Field(default=None, description="Dataset to train on (None: the one sft_dataset "
                                   "materialized for this partition, read from its metadata).")

    def settings(self, default_base: str) -> SFTSettings:
        return SFTSettings.for_base(**(self.model_dump(exclude={"dataset_id"})
                                       | {"base_model": self.base_model or default_base}))


@dg.asset(
    partitions_def=teacher_partitions,
    deps=["sft_dataset"],
    group_name="training",
    code_version=ASSET_CODE_VERSION,
    kinds={"pytorch", "duckdb"},
    description="SFT student of the dataset sft_dataset materialized for this teacher (TRL SFTTrainer, loss on the assistant turn); "
                "one model version per (dataset, settings), reused when asked again.",
    check_specs=[dg.AssetCheckSpec(
        "sft_student_learned", asset="sft_student", blocking=True,
        description="The student learned: its last loss (validation if held out, else training) is below the first "
                    "logged training loss.")],
)
def sft_student(context: dg.AssetExecutionContext, config: SFTRunConfig, warehouse: WarehouseResource,
                students: StudentResource, training: TrainingLauncher,
                pipes_client: dg.PipesSubprocessClient) -> dg.MaterializeResult:
    settings = config.settings(students.base())
    dataset_id = required_upstream(context, "sft_dataset", "dataset_id", config.dataset_id)
    with warehouse.open() as wh:
        planned = plan_sft_version(wh, dataset_id, settings, students.models_root(wh), context.run.run_id)
    version = trained(context, warehouse, training, pipes_client, planned)
    metadata = sft_version_metadata(context, version, f"{version.model_version}: SFT loss")
    return dg.MaterializeResult(metadata=metadata, check_results=[learned_check(version)])


def sft_version_metadata(context: dg.AssetExecutionContext, version: ModelVersion, title: str
                         ) -> dict[str, dg.MetadataValue]:
    """Register an SFT version's partition (its evaluation follows) and its metadata with the loss curve."""
    register_model_version(context.instance, version.model_version)
    chart = line_chart_png({"train loss": version.row["loss_history"], "validation loss": version.row["eval_history"]},
                           title, "optimizer step", "loss")
    return version_metadata(version) | {"loss_curve": dg.MetadataValue.md(markdown_image(chart, "SFT loss"))}


def trained(context: dg.AssetExecutionContext, warehouse: WarehouseResource, training: TrainingLauncher,
            pipes_client: dg.PipesSubprocessClient, planned: ModelVersion | TrainingJob) -> ModelVersion:
    """The stored version, or the planned job trained in the child process and stored now."""
    if isinstance(planned, ModelVersion):
        return planned
    result = training.run(context, pipes_client, planned)  # the warehouse is not held meanwhile
    with warehouse.open() as wh:
        return store_training_result(wh, planned, result)


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


class GRPORunConfig(dg.Config):
    """Run config of GRPO. Unset fields take the preset of the student's base (the paper's settings for a hub
    model; small groups and short episodes for the tiny student)."""

    parent_version: str | None = Field(default=None, description="SFT version to start from (None: the one "
                                       "sft_student materialized for this partition, read from its metadata).")
    games_per_step: int | None = Field(default=None, description="Train games per optimizer step.")
    num_generations: int | None = Field(default=None, description="Episodes per game (the group).")
    games_limit: int | None = Field(default=None, description="Train games to draw from (None: all).")
    curriculum_from: str | None = Field(default=None, description="Draw only the train games this policy played at "
                                        "the episode budget and never won (replaces games_limit).")
    epochs: float | None = None
    max_steps: int | None = Field(default=None, description="Stop after this many optimizer steps.")
    learning_rate: float | None = None
    beta: float | None = Field(default=None, description="KL coefficient to the starting model.")
    episode_steps: int | None = Field(default=None, description="Step budget per episode.")
    max_new_tokens: int | None = Field(default=None, description="Completion tokens per turn.")
    temperature: float | None = Field(default=None, description="Sampling temperature of the rollouts.")
    scale_rewards: str | None = Field(default=None, description="Divide centred rewards by the group's std "
                                      "('group'), the batch's ('batch') or nothing ('none').")
    call_cost: float | None = Field(default=None, description="λ_call per harness call (paper 0; alternative 0.05).")
    diversity_max: float | None = Field(default=None, description="λ_max of the annealed diversity bonus.")
    repeat_cap: int | None = Field(default=None, description="Repeats the repeat penalty counts at most (paper 10).")
    lora_r: int | None = Field(default=None, description="LoRA rank (alpha = 2r); None or 0: full fine-tuning.")
    forced_tokens_in_loss: bool | None = Field(default=None, description="Also score the tokens constrained "
                                               "decoding forced (None: the preset, off).")
    avoid_repeats: bool | None = Field(default=None, description="Rollouts leave out environment commands already "
                                       "issued in the same state (None: the preset, off).")
    guided_per_group: int | None = Field(default=None, description="Episodes of each group that decode without "
                                         "repeats, the rest as the policy samples (None: the preset, 0).")
    episode_level_loss: bool | None = Field(default=None, description="Weigh every episode equally in the loss "
                                            "(None: the preset: on for small, else every scored token equally).")
    per_device_train_batch_size: int | None = Field(default=None, description="Turn samples per forward pass.")
    save_steps: int | None = Field(default=None, description="Checkpoint every N steps (a rerun resumes).")
    vllm_server_url: str | None = Field(default=None, description="Generate rollouts on a `trl vllm-serve` server.")
    seed: int = 0
    engine: str | None = Field(default=None, description="Rollout engine (None: the fast engine).")
    kl_warning: float = Field(default=1.0, gt=0, description=(
        "The grpo_stayed_near_parent check warns when a step's KL to the parent exceeded this (the two GRPO runs "
        "here that lost held-out games peaked at 4.5 and 5.0; the three that won more at 0.04-0.36). Not a "
        "training setting."))


@dg.asset(
    partitions_def=teacher_partitions,
    deps=["sft_student"],
    group_name="training",
    code_version=ASSET_CODE_VERSION,
    kinds={"pytorch", "duckdb"},
    description="GRPO from the teacher's SFT student: multi-turn rollouts in the environment, cost-aware reward "
                "(each term logged), one sample per turn with its trajectory's group-normalized advantage.",
    check_specs=[dg.AssetCheckSpec(
        "grpo_rollouts_healthy", asset="grpo_student", blocking=True,
        description="Every logged step played its rollouts without a failed episode."),
        dg.AssetCheckSpec(
            "grpo_stayed_near_parent", asset="grpo_student",
            description="No logged step's KL to the parent exceeded the run config's kl_warning (a warning: "
                        "play on the held-out splits is the judge).")],
)
def grpo_student(context: dg.AssetExecutionContext, config: GRPORunConfig, alfworld: AlfworldResource,
                 warehouse: WarehouseResource, students: StudentResource, training: TrainingLauncher,
                 pipes_client: dg.PipesSubprocessClient) -> dg.MaterializeResult:
    parent = required_upstream(context, "sft_student", "model_version", config.parent_version)
    with warehouse.open() as wh:
        base = wh.scalar("SELECT base_model FROM model_versions WHERE model_version = ?", [parent])
        settings = GRPOSettings.for_base(base, **config.model_dump(exclude={"parent_version", "engine",
                                                                          "curriculum_from", "kl_warning"}))
        if config.curriculum_from is not None:
            settings = with_curriculum(wh, settings, config.curriculum_from)
        planned = plan_grpo_version(wh, parent, settings, students.models_root(wh), context.run.run_id,
                                    data_root=alfworld.root(), engine=config.engine)
    version = trained(context, warehouse, training, pipes_client, planned)
    register_model_version(context.instance, version.model_version)
    history = version.row["rollout_history"] or []
    metadata = version_metadata(version) | {"parent_version": dg.MetadataValue.text(parent)} | grpo_curves(version)
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
