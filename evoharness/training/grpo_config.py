"""GRPO's settings (TRL's ``grpo_config`` beside ``grpo_trainer``): what one GRPO run trains, declared once. The
command line and Dagster derive their options from this model; recipe files (``configs/recipes``) give its
values. Importing this module imports no torch or TRL."""

from __future__ import annotations

import math
from typing import ClassVar, Literal

from pydantic import BaseModel, Field, model_validator

from evoharness.training.reward import RewardConfig
from evoharness.training.trainer_utils import (
    ATTENTION_HELP,
    DDP_FIND_UNUSED_HELP,
    SCORED_POSITIONS_HELP,
    AttentionKernel,
    LoraSettings,
    ScoredPositions,
)

LOSS_NORMALIZATION = {"dapo": "tokens", "cispo": "tokens", "vespo": "tokens", "bnpo": "chunk_tokens",
                      "grpo": "sequences", "sapo": "sequences", "luspo": "sequences", "dr_grpo": "sequences"}
"""How TRL's ``_compute_loss`` normalizes each loss type, which fixes the weight of a micro-batch's loss:
``tokens``: by ``num_items_in_batch`` (set to the tokens of every process), weight 1; ``sequences``: a mean over
the micro-batch's sequences, weight = its sequences × processes / all sequences; ``chunk_tokens``: a mean over its
tokens, weight = its tokens × processes / all tokens."""


class GRPOSettings(BaseModel):
    """One GRPO run. The defaults are the paper's (group 8, 16 games per step, lr 1e-6, KL β 0.01, gradient clip
    1.0, 512 tokens per turn, 70 steps per episode); the recipe files set the values a student trains with."""

    games_per_step: int = Field(default=16, ge=1)
    num_generations: int = Field(default=8, ge=2, description="Episodes per game: the GRPO group.")
    games_limit: int | None = Field(default=None, ge=1, description="Train games to draw from (None: all).")
    games: list[str] | None = Field(default=None, min_length=1, description=(
        "Draw only these train games, by id (a curriculum: see curriculum.lost_train_games); None: the catalog's "
        "first games_limit."))
    games_from: str | None = Field(default=None, description="Where ``games`` came from, for lineage (e.g. the "
                                   "policy whose lost train games they are).")
    epochs: float = Field(default=150, gt=0, description="Passes over the training games.")
    max_steps: int | None = Field(default=None, ge=1, description="Stop after this many optimizer steps.")
    learning_rate: float = Field(default=1e-6, gt=0)
    beta: float = Field(default=0.01, ge=0, description=(
        "KL coefficient to the reference (the starting model). 0 also saves compute: no reference pass, and the "
        "turns whose advantage is 0 are not trained (they would add nothing)."))
    max_grad_norm: float = Field(default=1.0, gt=0)
    max_new_tokens: int = Field(default=512, ge=1, description="Completion tokens per turn.")
    temperature: float = Field(default=1.0, gt=0)
    episode_steps: int = Field(default=70, ge=1, description="Step budget per episode.")
    meta_action_cost: int = Field(default=1, ge=0)
    reward: RewardConfig = Field(default_factory=RewardConfig)
    lora: LoraSettings | None = Field(default=None, description="LoRA adapters (None: full fine-tuning).")
    scale_rewards: Literal["group", "batch", "none"] = Field(default="group", description=(
        "What a group-centred reward is divided by: its group's std (the paper's GRPO), the batch's std, or "
        "nothing. With 'group', a group where every episode fails has its tiny repeat/diversity differences "
        "scaled up to the size of a win's advantage."))
    forced_tokens_in_loss: bool = Field(default=False, description=(
        "Score the tokens that constrained decoding forced (one allowed token) in the loss and KL. Off: only "
        "tokens that were a choice are scored. A forced token has probability 1 under the constrained policy "
        "(no gradient); scoring it pushes the unconstrained model's probability of it up or down for nothing "
        "(a losing episode's forced tokens are driven towards 0, and the KL estimate with them: "
        "docs/results.md, GRPO)."))
    episode_level_loss: bool = Field(default=False, description=(
        "Weigh every episode equally in the loss, as GRPO weighs one completion: an episode's scored tokens share "
        "one episode's weight (its advantage times mean tokens per episode / its tokens). Off: every scored token "
        "weighs the same (TRL's dapo), so a long lost episode outweighs a short won one and a group's push-down on "
        "its losses outweighs its push-up on its wins, though its advantages sum to 0 (docs/results.md, GRPO)."))
    avoid_repeats: bool = Field(default=False, description=(
        "Rollouts decode as `evaluate --avoid-repeats` plays: constrained decoding leaves out the environment "
        "commands the episode already issued in the same state (not with a vLLM server)."))
    guided_per_group: int = Field(default=0, ge=0, description=(
        "Episodes of each group that decode without repeats (as avoid_repeats), the rest as the policy samples: "
        "where the policy loops to a loss and a guided episode of the same game wins, the group's advantages push "
        "up the command the guard chose in place of the repeat and push down the loop. 0: none."))
    guided_until_step: int | None = Field(default=None, ge=1, description=(
        "Fade the guided episodes out: guided_per_group at step 0, falling linearly to none at this optimizer "
        "step, so that the policy's own episodes carry the late steps; None: guided throughout."))
    ref_sync_steps: int | None = Field(default=None, ge=1, description=(
        "Refresh the KL reference to the current policy every this many steps (TRL's sync_ref_model with mix-up "
        "1.0), so that a long run is held near where it is, not where it started; None: the starting model."))
    lr_scheduler: Literal["linear", "cosine", "constant"] | None = Field(default=None, description=(
        "The learning rate over the run after warm-up; None: TRL's default, linear decay to 0 at the last step."))
    bf16: bool = Field(default=False, description="bf16 mixed precision in the training passes (GPUs; CPUs with "
                       "bf16 units). Rollouts generate with the weights as stored unless bf16_rollouts.")
    bf16_rollouts: bool = Field(default=False, description=(
        "With bf16 on, rollouts decode in bf16 too: a bf16 copy of the policy's embedding and layers each step, the "
        "final norm, LM head and sampling in the stored precision (local generation only). Off, or with bf16 off: "
        "rollouts decode with the weights as stored. Off by default: 1.23x a turn on a Zen-4 CPU, bound by a step's "
        "longest episodes (benchmarks/results/rollout_precision.json), and not screened on dev."))
    gradient_checkpointing: bool = Field(default=True, description="Recompute activations in the backward pass "
                                         "(a large base needs it; a student built here does not).")
    ddp_find_unused_parameters: bool | None = Field(default=None, description=DDP_FIND_UNUSED_HELP)
    attention: AttentionKernel = Field(default="auto", description=ATTENTION_HELP)
    scored_positions: ScoredPositions = Field(default="labelled", description=SCORED_POSITIONS_HELP)
    seed: int = 0
    logging_steps: int = Field(default=1, ge=1)
    loss_type: str = Field(default="dapo", description="TRL's loss type (see LOSS_NORMALIZATION for the supported).")
    per_device_train_batch_size: int = Field(default=8, ge=1, description=(
        "Turn samples per forward pass on each process (a micro-batch); a step's gradients accumulate across its "
        "micro-batches."))
    save_steps: int | None = Field(default=10, ge=1, description=(
        "Checkpoint every this many optimizer steps; a rerun resumes from the newest (None: no checkpoints)."))
    vllm_server_url: str | None = Field(default=None, description=(
        "Generate rollouts with a `trl vllm-serve` server at this URL (TRL's vLLM integration syncs the weights "
        "every step); None: HF generate in the training process."))

    @model_validator(mode="after")
    def _repeats_need_constraints(self) -> GRPOSettings:
        if (self.avoid_repeats or self.guided_per_group) and self.vllm_server_url is not None:
            raise ValueError("avoid_repeats and guided_per_group work through constrained decoding, which a vLLM "
                             "server does not apply")
        if self.bf16_rollouts and self.vllm_server_url is not None:
            raise ValueError("bf16_rollouts sets the precision of local generation; a vLLM server decodes in its own dtype")
        if self.guided_per_group and (self.avoid_repeats or self.guided_per_group >= self.num_generations):
            raise ValueError(f"guided_per_group ({self.guided_per_group}) guides some of a group's "
                             f"{self.num_generations} episodes and leaves at least one to the policy (avoid_repeats "
                             "guides them all)")
        return self

    def guided(self, position: int, step: int = 0) -> bool:
        """Whether the episode at ``position`` in the batch of optimizer step ``step`` (groups of
        ``num_generations`` in a row) is guided: every one under avoid_repeats, else the first
        :meth:`guided_in_group` of each group."""
        return self.avoid_repeats or position % self.num_generations < self.guided_in_group(step)

    def guided_in_group(self, step: int) -> int:
        """Guided episodes per group at ``step``: ``guided_per_group``, or under ``guided_until_step`` that many
        times the share of the fade still to go, rounded up (2 over 12 steps: 2 at steps 0-5, 1 at 6-11, then 0)."""
        if self.guided_until_step is None:
            return self.guided_per_group
        left = max(0.0, 1 - step / self.guided_until_step)
        return math.ceil(self.guided_per_group * left - 1e-9)

    @model_validator(mode="after")
    def _fade_and_refresh_need_their_parts(self) -> GRPOSettings:
        if self.guided_until_step is not None and not self.guided_per_group:
            raise ValueError("guided_until_step fades guided episodes out: set guided_per_group too")
        if self.ref_sync_steps is not None and self.beta == 0:
            raise ValueError("ref_sync_steps refreshes the KL reference, which beta = 0 does not use: set beta > 0")
        return self

    @model_validator(mode="after")
    def _episode_weights_need_a_token_loss(self) -> GRPOSettings:
        if self.episode_level_loss and LOSS_NORMALIZATION.get(self.loss_type) != "tokens":
            raise ValueError(f"episode_level_loss reweighs a loss normalized over tokens (loss_type "
                             f"{sorted(k for k, v in LOSS_NORMALIZATION.items() if v == 'tokens')}), not "
                             f"{self.loss_type!r}")
        return self

    @model_validator(mode="after")
    def _games_or_limit(self) -> GRPOSettings:
        if self.games is not None and self.games_limit is not None:
            raise ValueError("games names the train games to draw; games_limit takes the catalog's first N: give one")
        return self

    OPERATIONAL: ClassVar[frozenset[str]] = frozenset({"per_device_train_batch_size", "save_steps",
                                                       "vllm_server_url", "ddp_find_unused_parameters",
                                                       "attention", "scored_positions"})
    """Fields that change how a run executes, not what it trains: not part of a model version's id."""
    ID_OMITTED_WHEN_OFF: ClassVar[frozenset[str]] = frozenset({"avoid_repeats", "games", "games_from",
                                                               "episode_level_loss", "guided_per_group",
                                                               "guided_until_step", "ref_sync_steps",
                                                               "lr_scheduler", "bf16_rollouts"})
    """Switches added after versions were trained: left out of the id while off, so those versions keep theirs."""
