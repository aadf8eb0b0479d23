"""What SFT and GRPO share around TRL's trainers: LoRA settings, progress forwarding, saving the result
(atomically, with a manifest: :mod:`evoharness.artifacts`)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, Field

from evoharness.artifacts import discard_partial, partial_path, publish

LogCallback = Callable[[dict[str, float], int, int], None]
"""Called with (logged metrics, global step, max steps) at every Trainer log."""


DDP_FIND_UNUSED_HELP = (
    "Under several processes (DDP): whether every backward pass searches the graph for parameters the forward left "
    "unused. None: transformers' rule (search unless gradient checkpointing is on). false is allowed for a dense "
    "model (every trainable parameter used in every forward) but measured no faster: SFT of the small student in two "
    "processes ran at 0.92x the tokens/s without the search (benchmarks/results/ddp_unused.json); a "
    "mixture-of-experts model needs the search.")
"""The SFT and GRPO settings' ``ddp_find_unused_parameters`` description (one text for both)."""

AttentionKernel = Literal["auto", "sdpa", "eager"]
"""How the training passes compute attention: transformers' ``attn_implementation``, or ``auto``
(:func:`evoharness.training.hardware.training_attention`)."""

ATTENTION_HELP = (
    "The attention kernel of the training passes (the same function; numerics only). auto: eager where they run in "
    "bf16 on a CPU, sdpa elsewhere. On a Zen-4 core in bf16, torch's CPU flash kernel (sdpa) spends about a third "
    "of a student's forward and backward in attention; eager's plain matmuls do not "
    "(benchmarks/results/attention_kernels.json).")
"""The SFT and GRPO settings' ``attention`` description (one text for both)."""

ScoredPositions = Literal["labelled", "all"]
"""The positions the fused LM head projects: ``labelled`` ones only, or ``all`` off Triton devices (TRL's choice)."""

SCORED_POSITIONS_HELP = (
    "The positions the fused LM head of the training passes projects through the vocabulary (the same "
    "log-probabilities; speed only). labelled: only those with a label (a turn's completion); all: TRL's choice, "
    "every position where Triton is absent, as on a CPU. On a Zen-4 core in bf16 labelled ran SFT 1.16x and GRPO's "
    "scoring and loss 1.24x faster (benchmarks/results/scored_positions.json).")
"""The SFT and GRPO settings' ``scored_positions`` description (one text for both)."""


class LoraSettings(BaseModel):
    """LoRA adapters (merged into the saved model after training)."""

    r: int = Field(default=64, ge=1)
    alpha: int = Field(default=128, ge=1)
    dropout: float = Field(default=0.05, ge=0, lt=1)
    target_modules: str | list[str] = "all-linear"

    def peft_config(self) -> Any:
        from peft import LoraConfig

        return LoraConfig(r=self.r, lora_alpha=self.alpha, lora_dropout=self.dropout,
                          target_modules=self.target_modules, task_type="CAUSAL_LM")


def log_forwarder(on_log: LogCallback) -> Any:
    """A ``TrainerCallback`` that forwards every Trainer log to ``on_log`` (progress in Dagster, the CLI)."""
    from transformers import TrainerCallback

    class ForwardLogs(TrainerCallback):  # type: ignore[misc]
        def on_log(self, args: Any, state: Any, control: Any, logs: dict[str, float] | None = None,
                   **kwargs: Any) -> None:
            if logs:
                on_log(dict(logs), state.global_step, state.max_steps)

    return ForwardLogs()


def route_logs(trainer: Any, on_log: LogCallback | None) -> None:
    """Send the trainer's logs to ``on_log`` instead of stdout (when given)."""
    if on_log is not None:
        from transformers import PrinterCallback

        trainer.remove_callback(PrinterCallback)
        trainer.add_callback(log_forwarder(on_log))


def save_trained(trainer: Any, tokenizer: Any, model_dir: Path, merged_lora: bool,
                 before_seal: Callable[[Path], None] | None = None) -> Any:
    """Save the trained model (LoRA adapters merged into it) and its tokenizer; returns the saved model. Under
    several processes only the main one writes, and every process waits for it. A sharded model (DeepSpeed
    ZeRO-3, FSDP) is gathered by the Trainer's ``save_model``; its adapters are merged from the saved folder.

    The folder is saved atomically (:mod:`evoharness.artifacts`): written as ``.model.partial`` beside
    ``model_dir``, sealed with a manifest of every file's size and sha256, then renamed to ``model_dir``
    (replacing an older one), so a kill while saving never leaves a half model at ``model_dir``.
    ``before_seal(folder)`` (main process) writes files that belong in the manifest, e.g. the student card."""
    main = trainer.is_world_process_zero()
    partial = partial_path(model_dir)
    if main:
        discard_partial(model_dir)
        partial.mkdir(parents=True)
    trainer.accelerator.wait_for_everyone()
    if getattr(trainer, "is_deepspeed_enabled", False) or getattr(trainer, "is_fsdp_enabled", False):
        trainer.save_model(str(partial))
        if main:
            if merged_lora:
                from peft import AutoPeftModelForCausalLM

                merged = AutoPeftModelForCausalLM.from_pretrained(str(partial)).merge_and_unload()
                for name in ("adapter_model.safetensors", "adapter_config.json"):
                    (partial / name).unlink(missing_ok=True)
                merged.save_pretrained(partial)
            tokenizer.save_pretrained(partial)
        trained = trainer.model
    else:
        trained = trainer.model.merge_and_unload() if merged_lora else trainer.model
        if main:
            trained.save_pretrained(partial)
            tokenizer.save_pretrained(partial)
    if main:
        if before_seal is not None:
            before_seal(partial)
        publish(partial, model_dir, "model")
    trainer.accelerator.wait_for_everyone()
    return trained


def train_resumed(trainer: Any, checkpoints: Path) -> None:
    """``trainer.train()`` from the newest complete checkpoint in ``checkpoints`` (from the start if none).

    A checkpoint already at its run's last step (a kill after the final checkpoint, before the model was saved)
    is loaded, not trained on: the Trainer would run one more step past ``max_steps`` from it."""
    checkpoint = newest_checkpoint(checkpoints)
    state = json.loads((Path(checkpoint) / "trainer_state.json").read_text()) if checkpoint else {}
    if checkpoint is None or state["global_step"] < state.get("max_steps", 0):
        trainer.train(resume_from_checkpoint=checkpoint)
        return
    from transformers import TrainerState

    trainer._load_from_checkpoint(checkpoint)  # the weights (or adapters), as train() would resume them
    trainer.state = TrainerState.load_from_json(str(Path(checkpoint) / "trainer_state.json"))


def newest_checkpoint(folder: Path) -> str | None:
    """The newest complete ``checkpoint-N`` in ``folder``, or None. The Trainer writes ``trainer_state.json``
    last, so a run killed while saving leaves a checkpoint without it, or with it empty (killed between opening
    and writing it): either is skipped."""
    done = [c for c in folder.glob("checkpoint-*") if _saved_state(c / "trainer_state.json")]
    return str(max(done, key=lambda c: int(c.name.rsplit("-", 1)[1]))) if done else None


def _saved_state(path: Path) -> bool:
    try:
        return "global_step" in json.loads(path.read_text())
    except (OSError, ValueError):  # absent, unreadable, or cut short by the kill
        return False
