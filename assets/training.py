"""``sft_student``: a student fine-tuned with TRL on a teacher's newest curated dataset (a model version)."""



import dagster as dg
from pydantic import Field

from evoharness.reporting.charts import line_chart_png, markdown_image, markdown_table
from evoharness.training.model_versions import summary_row, train_sft_version
from evoharness.training.sft import SFTResult, SFTSettings
from evoharness.training.tiny_student import TINY
from pipelines.partitions import register_model_version, teacher_partitions
from pipelines.resources import WarehouseResource


class SFTRunConfig(dg.Config):
    """Run config of a student's SFT. Unset fields take the preset of the base: the paper's LoRA settings for
    a hub model or folder, full fine-tuning with a large step for the locally built tiny student."""

    base_model: str = Field(default=TINY, description=f"Hub id (e.g. Qwen/Qwen3-8B), local folder, or {TINY!r}.")
    epochs: float | None = Field(default=None, description="Passes over the training split.")
    learning_rate: float | None = None
    batch_size: int | None = Field(default=None, description="Examples per optimizer step.")
    per_device_batch_size: int | None = None
    max_length: int | None = Field(default=None, description="Tokens per example.")
    lora_r: int | None = Field(default=None, description="LoRA rank (alpha = 2r); 0: full fine-tuning.")
    max_steps: int | None = Field(default=None, description="Stop after this many optimizer steps.")
    bf16: bool | None = Field(default=None, description="bf16 mixed precision (GPU).")
    seed: int = 0
    models_dir: str | None = Field(default=None, description="None: <warehouse folder>/models.")

    def settings(self) -> SFTSettings:
        return SFTSettings.for_base(**self.model_dump(exclude={"models_dir"}))


@dg.asset(
    partitions_def=teacher_partitions,
    deps=["sft_dataset"],
    group_name="training",
    description="SFT student of the teacher's newest curated dataset (TRL SFTTrainer, loss on the assistant turn); "
                "one model version per (dataset, settings), reused when asked again.",
    check_specs=[dg.AssetCheckSpec(
        "sft_student_learned", asset="sft_student", blocking=True,
        description="The student learned: its last loss (validation if held out, else training) is below the first "
                    "logged training loss.")],
)
def sft_student(context: dg.AssetExecutionContext, config: SFTRunConfig,
                warehouse: WarehouseResource) -> dg.MaterializeResult:
    teacher = context.partition_key
    settings = config.settings()

    def on_log(logs: dict[str, float], step: int, max_steps: int) -> None:
        shown = {k: round(v, 4) for k, v in logs.items() if k in ("loss", "eval_loss", "mean_token_accuracy")}
        if shown:
            context.log.info("step %d/%d %s", step, max_steps, shown)

    with warehouse.open() as wh:
        models_root = config.models_dir or str(wh.path.parent / "models")
        version = train_sft_version(wh, teacher, settings, models_root, context.run.run_id, on_log=on_log)
    register_model_version(context.instance, version.model_version)
    result = version.result
    row = summary_row(version)
    chart = line_chart_png({"train loss": result.loss_history, "validation loss": result.eval_history},
                           f"{version.model_version}: SFT loss", "optimizer step", "loss")
    metadata: dict[str, dg.MetadataValue] = {
        "model_version": dg.MetadataValue.text(version.model_version),
        "dataset_id": dg.MetadataValue.text(version.dataset_id),
        "path": dg.MetadataValue.path(version.path),
        "reused_stored_version": dg.MetadataValue.bool(version.reused),
        "steps": dg.MetadataValue.int(result.steps),
        "parameters": dg.MetadataValue.int(result.parameters),
        "summary": dg.MetadataValue.md(markdown_table(list(row), [list(row.values())])),
        "loss_curve": dg.MetadataValue.md(markdown_image(chart, "SFT loss")),
    }
    if result.train_loss is not None:
        metadata["train_loss"] = dg.MetadataValue.float(result.train_loss)
    if result.eval_loss is not None:
        metadata["eval_loss"] = dg.MetadataValue.float(result.eval_loss)
    return dg.MaterializeResult(metadata=metadata, check_results=[learned_check(result)])


def learned_check(result: SFTResult) -> dg.AssetCheckResult:
    """Passes when the final loss (validation if any, else training) is below the first training loss."""
    first = result.loss_history[0][1] if result.loss_history else None
    last = result.eval_loss if result.eval_loss is not None else result.train_loss
    passed = first is not None and last is not None and last < first
    metadata = {"first_train_loss": dg.MetadataValue.float(first) if first is not None else None,
                "final_loss": dg.MetadataValue.float(last) if last is not None else None}
    return dg.AssetCheckResult(check_name="sft_student_learned", passed=passed,
                               metadata={k: v for k, v in metadata.items() if v is not None})
