"""Supervised fine-tuning of a student on a curated dataset with TRL's ``SFTTrainer``.

The curated dataset holds one rendered turn per example (system, user = the BPE prompt of that turn,
assistant = the teacher's ``<think>…</think><action>…</action>``). It is trained in TRL's
prompt-completion form, so the loss covers the assistant turn only with any chat template — the official
Qwen3 one of a hub base as well as the tiny student's copy of it.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import datasets
import jinja2
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback
from trl import SFTConfig, SFTTrainer

from evoharness.artifacts import load_dataset_folder
from evoharness.harness.prompts import load_prompt_set
from evoharness.training.decisions import decision_metrics
from evoharness.training.hardware import training_attention
from evoharness.training.lm_head import score_positions
from evoharness.training.react_view import react_examples
from evoharness.training.sft_config import SFTSettings
from evoharness.training.student_card import write_student_card
from evoharness.training.tiny_student import build_tiny_student, is_local_preset
from evoharness.training.trainer_utils import (
    LogCallback,
    route_logs,
    save_trained,
    train_resumed,
)


@dataclass
class SFTResult:
    """A trained student and how its training went."""

    model_dir: str
    base_model: str
    train_examples: int
    validation_examples: int
    steps: int
    train_loss: float | None
    eval_loss: float | None
    seconds: float
    parameters: int
    loss_history: list[tuple[int, float]] = field(default_factory=list)
    eval_history: list[tuple[int, float]] = field(default_factory=list)
    decision_history: list[dict[str, float]] = field(default_factory=list)  # per evaluation: step, decision/*
    tokens_seen: int | None = None


def to_prompt_completion(example: dict[str, Any]) -> dict[str, Any]:
    """``messages`` (…, assistant) → ``prompt`` (all but the last message) and ``completion`` (the last)."""
    messages = example["messages"]
    if not messages or messages[-1]["role"] != "assistant":
        raise ValueError(f"example {example.get('episode_id')}/{example.get('turn')}: last message is not the "
                         "assistant's")
    return {"prompt": messages[:-1], "completion": messages[-1:]}


def rerender(example: dict[str, Any], prompt_set: str, prompt_sha: str | None = None) -> dict[str, Any]:
    """The example's messages rendered again from its stored template variables with ``prompt_set``; ``prompt_sha``,
    when given, must be the set's sha256 (``datasets`` caches a map by its arguments, not by the template files it
    reads: passing the sha makes an edited template a new map, never a cached rendering of the old text)."""
    if not example.get("turn_vars"):
        raise ValueError(f"example {example.get('episode_id')}/{example.get('turn')} has no stored turn variables: "
                         "reconsolidate (`evoharness consolidate --reconsolidate`) and curate again to train with "
                         f"prompt set {prompt_set!r}")
    turn_vars = json.loads(example["turn_vars"])
    prompts = load_prompt_set(prompt_set)
    if prompt_sha is not None and prompts.sha256 != prompt_sha:
        raise ValueError(f"prompt set {prompt_set!r} changed while rendering (sha {prompts.sha256}, expected {prompt_sha})")
    try:
        rendered = prompts.render({"max_steps": turn_vars["max_steps"]}, turn_vars)
    except jinja2.UndefinedError as error:
        raise ValueError(f"example {example.get('episode_id')}/{example.get('turn')}: prompt set {prompt_set!r} needs "
                         f"a turn variable the stored example lacks ({error}): reconsolidate (`evoharness consolidate "
                         "--reconsolidate`) and curate again") from error
    return {"messages": [*rendered.messages(), example["messages"][-1]]}


def prepare_splits(dataset_path: str, prompt_set: str | None = None,
                   view: str = "bpe") -> tuple[Any, Any | None]:
    """The curated dataset on disk as prompt-completion (train, validation or None when empty), re-rendered
    with ``prompt_set`` when given. ``turn_vars`` is kept for decision metrics."""
    loaded = load_dataset_folder(dataset_path)
    if "train" not in loaded or len(loaded["train"]) == 0:
        raise ValueError(f"{dataset_path}: no training examples")
    keep = ["prompt", "completion", "turn_vars"]
    parts = {}
    for name, part in loaded.items():
        if view == "react":
            part = datasets.Dataset.from_list(list(react_examples(part)))
        if not len(part):
            continue
        if prompt_set is not None:
            part = part.map(rerender, fn_kwargs={"prompt_set": prompt_set,
                                                 "prompt_sha": load_prompt_set(prompt_set).sha256})
        parts[name] = part.map(to_prompt_completion, remove_columns=[c for c in part.column_names if c not in keep])
    return parts["train"], parts.get("validation")


def corpus(dataset: Any) -> list[str]:
    """Every message text of a prompt-completion split (for training a tiny student's tokenizer)."""
    return [m["content"] for row in dataset for m in row["prompt"] + row["completion"]]


def _base_model(settings: SFTSettings, train: Any, folder: Path) -> str:
    if not is_local_preset(settings.base_model):
        return settings.base_model
    if (folder / "config.json").is_file():  # built by an earlier, interrupted run of the same training
        return str(folder)
    # Every process of a launch builds the same (seeded) student: each in its own folder, then one rename wins,
    # so no process ever loads a half-written base.
    folder.parent.mkdir(parents=True, exist_ok=True)
    staging = build_tiny_student(tempfile.mkdtemp(prefix=f"{folder.name}.building-", dir=folder.parent),
                                 corpus(train), settings.spec())
    try:
        staging.rename(folder)
    except OSError:
        if not (folder / "config.json").is_file():
            raise
        shutil.rmtree(staging)  # another process renamed its identical build first
    return str(folder)


def _decision_rows(validation: Any, turns: int) -> list[dict[str, Any]]:
    """An even sample of ``turns`` held-out turns (fixed, so every evaluation scores the same ones)."""
    if validation is None or not turns or "turn_vars" not in validation.column_names:
        return []
    stride = max(1, len(validation) // turns)
    return [validation[i] for i in range(0, len(validation), stride)][:turns]


def decision_callback(rows: list[dict[str, Any]]) -> Any:
    """A ``TrainerCallback`` that adds the decision metrics of ``rows`` to every evaluation's log."""
    class DecisionMetrics(TrainerCallback):  # type: ignore[misc]
        def on_evaluate(self, args: Any, state: Any, control: Any, model: Any = None, processing_class: Any = None,
                        metrics: dict[str, float] | None = None, **kwargs: Any) -> None:
            scores = decision_metrics(model, processing_class, rows)
            state.log_history.append({"step": state.global_step, **scores})
            if metrics is not None:
                metrics.update(scores)

    return DecisionMetrics()


def steps_for_tokens(tokenized: Any, settings: SFTSettings) -> int:
    """Optimizer steps that see about ``settings.max_tokens`` input tokens of the tokenized training split."""
    assert settings.max_tokens is not None
    lengths = [len(ids) for ids in tokenized["input_ids"]]
    tokens_per_step = sum(lengths) / len(lengths) * settings.batch_size
    return max(1, round(settings.max_tokens / tokens_per_step))


def _check_lengths(tokenized: Any, max_length: int) -> None:
    """Raise if an example is longer than ``max_length`` tokens (padding-free batches are not truncated)."""
    longest = max(len(ids) for ids in tokenized["input_ids"])
    if longest > max_length:
        raise ValueError(f"an example has {longest} tokens, over sft.max_length {max_length}; padding-free batches "
                         "are not truncated: raise max_length or turn padding_free off")


def train_sft(dataset_path: str, output_dir: str | Path, settings: SFTSettings,
              on_log: LogCallback | None = None) -> SFTResult:
    """Fine-tune ``settings.base_model`` on the dataset at ``dataset_path``; the merged model and its tokenizer
    are saved to ``<output_dir>/model``."""
    output = Path(output_dir)
    train, validation = prepare_splits(dataset_path, settings.prompt_set, settings.view)
    base = _base_model(settings, train, output / "base")
    tokenizer = AutoTokenizer.from_pretrained(base)
    model = AutoModelForCausalLM.from_pretrained(base, dtype="auto", attn_implementation=training_attention(
        settings.attention, settings.bf16, packed=settings.padding_free))
    # the launcher's world size (accelerate launch / torchrun): batch_size stays the examples per optimizer step
    per_device, accumulation = settings.batch_layout(int(os.environ.get("WORLD_SIZE", "1")))
    config = SFTConfig(
        output_dir=str(output / "checkpoints"), num_train_epochs=settings.epochs, max_steps=settings.max_steps or -1,
        learning_rate=settings.learning_rate, lr_scheduler_type=settings.lr_scheduler,
        warmup_steps=settings.warmup_ratio, per_device_train_batch_size=per_device,
        per_device_eval_batch_size=per_device, gradient_accumulation_steps=accumulation,
        max_length=None if settings.padding_free else settings.max_length,  # TRL truncates only padded batches
        completion_only_loss=True, bf16=settings.bf16, use_cpu=not torch.cuda.is_available(), seed=settings.seed,
        logging_steps=settings.logging_steps,
        logging_first_step=True,
        eval_strategy="epoch" if validation is not None else "no", save_strategy="steps",
        save_steps=settings.save_steps, save_total_limit=2, report_to="none", disable_tqdm=True,
        dataloader_pin_memory=torch.cuda.is_available(), padding_free=settings.padding_free,
        pad_to_multiple_of=settings.pad_to_multiple_of,
        train_sampling_strategy="group_by_length" if settings.group_by_length else "random",
        include_num_input_tokens_seen="non_padding",
        activation_checkpointing=settings.gradient_checkpointing,
        torch_compile=settings.torch_compile, ddp_find_unused_parameters=settings.ddp_find_unused_parameters,
    )
    score_positions(settings.scored_positions)
    trainer = SFTTrainer(model=model, args=config, train_dataset=train, eval_dataset=validation,
                         processing_class=tokenizer,
                         peft_config=settings.lora.peft_config() if settings.lora is not None else None)
    if settings.padding_free:
        _check_lengths(trainer.train_dataset, settings.max_length)
    if settings.max_tokens is not None:
        trainer.args.max_steps = steps_for_tokens(trainer.train_dataset, settings)
    route_logs(trainer, on_log)
    decisions = _decision_rows(validation, settings.decision_turns)
    if decisions:
        trainer.add_callback(decision_callback(decisions))
    started = time.perf_counter()
    checkpoints = Path(config.output_dir or output / "checkpoints")
    train_resumed(trainer, checkpoints)
    seconds = time.perf_counter() - started
    if validation is not None and not any(h.get("step") == trainer.state.global_step and "eval_loss" in h
                                          for h in trainer.state.log_history):
        trainer.evaluate()  # the last evaluation is of the final model
    model_dir = output / "model"
    card = {"settings": settings.model_dump(mode="json"), "dataset": dataset_path,
            "steps": trainer.state.global_step}
    trained = save_trained(trainer, tokenizer, model_dir, merged_lora=settings.lora is not None,
                           before_seal=lambda folder: write_student_card(folder, settings.prompt_set, card))
    history = trainer.state.log_history
    losses = [(int(h["step"]), float(h["loss"])) for h in history if "loss" in h]
    evals = [(int(h["step"]), float(h["eval_loss"])) for h in history if "eval_loss" in h]
    result = SFTResult(
        model_dir=str(model_dir), base_model=settings.base_model, train_examples=len(train),
        validation_examples=0 if validation is None else len(validation), steps=trainer.state.global_step,
        train_loss=losses[-1][1] if losses else None, eval_loss=evals[-1][1] if evals else None, seconds=seconds,
        parameters=sum(p.numel() for p in trained.parameters()), loss_history=losses, eval_history=evals,
        decision_history=[{k: float(v) for k, v in h.items() if k == "step" or k.startswith("decision/")}
                          for h in history if "decision/action_accuracy" in h],
        tokens_seen=int(trainer.state.num_input_tokens_seen) if trainer.state.num_input_tokens_seen else None,
    )
    return result

