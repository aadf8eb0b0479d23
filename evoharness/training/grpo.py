"""GRPO's entry points: the trainer of a run, its TRL config, its rollouts, and :func:`train_grpo` (TRL's split:
settings in :mod:`~evoharness.training.grpo_config`, the trainer class in :mod:`~evoharness.training.grpo_trainer`,
the rollout-to-sample maths in :mod:`~evoharness.training.grpo_samples`)."""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import datasets
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer
from trl import GRPOConfig

from evoharness.agents.runner import RunSettings
from evoharness.artifacts import verify_artifact
from evoharness.envs.alfworld import SEED_BANK, GameCatalog
from evoharness.harness.budget import StepBudget
from evoharness.harness.experience import ExperienceBankData, load_bank_file
from evoharness.harness.prompts import Mode, load_prompt_set
from evoharness.teachers.clients.hf_batching import Sampling
from evoharness.training.grpo_config import GRPOSettings
from evoharness.training.grpo_trainer import EpisodeGRPOTrainer, RolloutSource
from evoharness.training.hardware import training_attention
from evoharness.training.lm_head import score_positions
from evoharness.training.reward import reward_functions
from evoharness.training.rollout import RolloutEngine
from evoharness.training.student_card import read_student_card, student_prompt_set, write_student_card
from evoharness.training.trainer_utils import LogCallback, route_logs, save_trained, train_resumed


@dataclass
class GRPOResult:
    model_dir: str
    games: int
    steps: int
    seconds: float
    parameters: int
    history: list[dict[str, float]] = field(default_factory=list)  # per logged step: reward terms, episode stats


def training_games(settings: GRPOSettings, data_root: str | None = None) -> list[str]:
    """The train-split games GRPO draws from: ``settings.games`` or the catalog's first ``games_limit``. Evaluation
    splits are never used for training: a named game that is not a train game is refused."""
    train = [g.game_id for g in GameCatalog(data_root).games("train")]
    if settings.games is None:
        return train[:settings.games_limit]
    outside = sorted(set(settings.games) - set(train))
    if outside:
        raise ValueError(f"GRPO trains on train games only; {len(outside)} of settings.games are not train games "
                         f"under this data root, e.g. {outside[0]!r}")
    return list(settings.games)


def train_grpo(model_path: str, output_dir: str | Path, settings: GRPOSettings, *,
               bank: ExperienceBankData | None = None,
               data_root: str | None = None, engine: str | None = None,
               on_log: LogCallback | None = None, rollouts: RolloutSource | None = None) -> GRPOResult:
    """GRPO from the model at ``model_path`` (an SFT model version); saves to ``<output_dir>/model``.

    Runs in one process or under ``accelerate launch`` (each process plays its share of a step's episodes;
    rewards are normalized over all of them). Checkpoints go to ``<output_dir>/checkpoints`` every
    ``settings.save_steps`` steps, and a rerun resumes from the newest. ``rollouts`` replaces the episodes played
    in the environment (recorded rollouts, for tests and the multi-process comparison)."""
    output = Path(output_dir)
    if rollouts is None:
        prompt_set = student_prompt_set(model_path, Mode.BPE)  # the rendering the student was trained with
        rollouts = rollout_engine(settings, bank, data_root, engine, prompt_set)
    trainer = build_grpo_trainer(model_path, output_dir, settings, rollouts, data_root)
    games = len(trainer.train_dataset)
    route_logs(trainer, on_log)
    started = time.perf_counter()
    try:
        train_resumed(trainer, output / "checkpoints")
    finally:
        rollouts.close()
    seconds = time.perf_counter() - started
    model_dir = output / "model"
    card = {"settings": settings.model_dump(mode="json") | {"view": "bpe"}, "start": model_path, "games": games}
    trained = save_trained(trainer, trainer.processing_class, model_dir, merged_lora=settings.lora is not None,
                           before_seal=lambda folder: write_student_card(
                               folder, read_student_card(model_path).get("prompt_set"), card))
    history = [{k: float(v) for k, v in entry.items() if isinstance(v, int | float)}
               for entry in trainer.state.log_history if "reward" in entry]
    return GRPOResult(model_dir=str(model_dir), games=games, steps=trainer.state.global_step, seconds=seconds,
                      parameters=sum(p.numel() for p in trained.parameters()), history=history)


def build_grpo_trainer(model_path: str, output_dir: str | Path, settings: GRPOSettings, rollouts: RolloutSource,
                       data_root: str | None = None) -> Any:
    """The trainer of :func:`train_grpo`, not yet trained (checkpoints under ``<output_dir>/checkpoints``)."""
    verify_artifact(model_path, "model")
    games = training_games(settings, data_root)
    dataset = datasets.Dataset.from_list([{"prompt": [{"role": "user", "content": g}], "game_id": g} for g in games])
    tokenizer = AutoTokenizer.from_pretrained(model_path)
    model = AutoModelForCausalLM.from_pretrained(model_path, dtype="auto", attn_implementation=training_attention(
        settings.attention, settings.bf16))
    # the launcher's world size (accelerate launch / torchrun set it); accelerate's state is set up by the config
    config = trl_config(settings, Path(output_dir) / "checkpoints", int(os.environ.get("WORLD_SIZE", "1")))
    score_positions(settings.scored_positions)
    return EpisodeGRPOTrainer(model=model, reward_funcs=reward_functions(settings.reward), args=config,
                            train_dataset=dataset, processing_class=tokenizer,
                            peft_config=settings.lora.peft_config() if settings.lora is not None else None,
                            rollouts=rollouts, micro_batch_size=settings.per_device_train_batch_size,
                            repeats_at=settings.reward.repeats_at,
                            with_progress=settings.reward.progress_weight > 0,
                            forced_tokens_in_loss=settings.forced_tokens_in_loss,
                            episode_level_loss=settings.episode_level_loss,
                            guided_wins_only=settings.guided_per_group > 0)


def trl_config(settings: GRPOSettings, checkpoints: Path, processes: int = 1) -> Any:
    """TRL's config for one optimizer step per generation round: a dataset row is a game, a step's
    ``games_per_step × num_generations`` episodes are split evenly over the processes (TRL's
    ``per_device_train_batch_size`` counts *episodes* here), and the turn samples they produce are trained in
    micro-batches of ``settings.per_device_train_batch_size`` inside the step (not by TRL's accumulation)."""
    episodes = settings.games_per_step * settings.num_generations
    if episodes % processes:
        raise ValueError(f"{episodes} episodes per step (games_per_step × num_generations) cannot be split evenly "
                         f"over {processes} processes")
    vllm = settings.vllm_server_url is not None
    return GRPOConfig(
        output_dir=str(checkpoints), per_device_train_batch_size=episodes // processes, steps_per_generation=1,
        gradient_accumulation_steps=1, num_generations=settings.num_generations, num_train_epochs=settings.epochs,
        max_steps=settings.max_steps or -1, learning_rate=settings.learning_rate, beta=settings.beta,
        max_grad_norm=settings.max_grad_norm, max_completion_length=settings.max_new_tokens,
        temperature=settings.temperature, bf16=settings.bf16, use_cpu=not torch.cuda.is_available(),
        activation_checkpointing=settings.gradient_checkpointing, scale_rewards=settings.scale_rewards,
        ddp_find_unused_parameters=settings.ddp_find_unused_parameters,
        seed=settings.seed, logging_steps=settings.logging_steps, loss_type=settings.loss_type,
        save_strategy="steps" if settings.save_steps else "no", save_steps=settings.save_steps or 500,
        report_to="none", disable_tqdm=True, dataloader_pin_memory=False,
        reward_weights=[1.0] * len(reward_functions(settings.reward)),
        use_vllm=vllm, vllm_mode="server", vllm_server_base_url=settings.vllm_server_url,
        vllm_importance_sampling_correction=False,  # the rollouts' generator does not return sampling logprobs
        lr_scheduler_type=settings.lr_scheduler or "linear",
        sync_ref_model=settings.ref_sync_steps is not None, ref_model_mixup_alpha=1.0,
        ref_model_sync_steps=settings.ref_sync_steps or 512,
    )


def rollout_engine(settings: GRPOSettings, bank: ExperienceBankData | None, data_root: str | None,
                   engine: str | None, prompt_set: str = "alfworld/bpe") -> RolloutEngine:
    """Episodes in the environment through the BPE harness, generated in-process or by the vLLM server."""
    run_settings = RunSettings(
        budget=StepBudget(max_steps=settings.episode_steps, meta_action_cost=settings.meta_action_cost),
        concurrency=settings.games_per_step * settings.num_generations, bank=bank or load_bank_file(SEED_BANK),
    )
    return RolloutEngine(
        load_prompt_set(prompt_set), run_settings,
        Sampling(max_new_tokens=settings.max_new_tokens, temperature=settings.temperature),
        data_root=data_root, engine=engine, vllm_server_url=settings.vllm_server_url,
        guided=settings.guided, compute_dtype="bfloat16" if settings.bf16 and settings.bf16_rollouts else None,
    )


