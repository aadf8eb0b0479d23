"""SFT's settings: what one supervised fine-tuning run trains, declared once (the command line and Dagster derive
their options from this model; recipe files give its values). Importing this module imports no torch or TRL."""

from __future__ import annotations

from typing import ClassVar, Literal

from pydantic import BaseModel, Field

from evoharness.training.tiny_student import STUDENT_PRESETS, TinyStudentSpec
from evoharness.training.trainer_utils import (
    ATTENTION_HELP,
    DDP_FIND_UNUSED_HELP,
    SCORED_POSITIONS_HELP,
    AttentionKernel,
    LoraSettings,
    ScoredPositions,
)

STUDENT_PROMPT_SETS = {"bpe": "alfworld/bpe_student", "react": "alfworld/react_compact"}
"""The prompt set a student built here is trained and played with, per view."""


class SFTSettings(BaseModel):
    """One SFT run: what to train and how. The defaults are the paper's (LoRA r=64, α=128, lr 1e-5 cosine, batch
    16, length 4096, 4 epochs) for a hub base; the recipe files set the values a student trains with."""

    base_model: str = Field(default="Qwen/Qwen3-8B",
                            description=f"Hub id, local folder, or a student built here ({', '.join(STUDENT_PRESETS)}).")
    student_spec: TinyStudentSpec | None = Field(default=None, description="Size of a student built here (None: "
                                                 "the preset that base_model names).")
    prompt_set: str | None = Field(default=None, description="Re-render every turn with this prompt set (e.g. "
                                   "alfworld/bpe_compact); None: train on the teacher's rendering as stored.")
    view: Literal["bpe", "react"] = Field(default="bpe", description="react: train on the dataset's environment "
                                          "turns only, without the workspace (the BPE-vs-ReAct comparison).")
    lora: LoraSettings | None = Field(default_factory=LoraSettings, description="None: full fine-tuning.")
    epochs: float = Field(default=4, gt=0)
    learning_rate: float = Field(default=1e-5, gt=0)
    lr_scheduler: str = "cosine"
    warmup_ratio: float = Field(default=0.03, ge=0, lt=1, description="Share of steps spent warming up.")
    batch_size: int = Field(default=16, ge=1, description="Examples per optimizer step.")
    per_device_batch_size: int = Field(default=4, ge=1)
    max_length: int = Field(default=4096, ge=16, description="Tokens per example; longer ones are truncated.")
    group_by_length: bool = Field(default=False, description="Batch examples of similar length (less padding).")
    padding_free: bool = Field(default=False, description=(
        "Concatenate a batch into one sequence, no padding (examples are then not truncated: one longer than "
        "max_length is an error)."))
    pad_to_multiple_of: int | None = Field(default=None, ge=1, description=(
        "Pad each batch to a multiple of this many tokens (None: to its longest example); the padding is masked, so "
        "what is trained is the same. Fewer batch shapes hold less memory in bf16 on CPU: 64 gave 25 % less peak "
        "memory at 0.94x the tokens/s (benchmarks/results/sft_buckets.json), so the recipes leave it unset."))
    save_steps: int = Field(default=200, ge=1, description="Checkpoint every N steps; a rerun resumes from the last.")
    decision_turns: int = Field(default=0, ge=0, description="Held-out turns whose greedy decision is compared with "
                                "the teacher's at every evaluation (0: none).")
    seed: int = 0
    bf16: bool = Field(default=False, description="bf16 mixed precision: fast on GPUs and on CPUs with bf16 units "
                       "(AMX, AVX512-BF16), many times slower where the CPU emulates it (recipes: `auto`).")
    gradient_checkpointing: bool = Field(default=True, description="Recompute activations in the backward pass: "
                                         "memory for time (a large base needs it; a student built here does not).")
    max_tokens: int | None = Field(default=None, ge=1, description="Train for about this many input tokens: the "
                                   "steps are set from the dataset's mean tokens per example (equal-compute "
                                   "baselines); overrides epochs and max_steps.")
    logging_steps: int = Field(default=5, ge=1)
    max_steps: int | None = Field(default=None, ge=1, description="Stop after this many optimizer steps.")
    torch_compile: bool = Field(default=False, description="Train the model compiled by torch.compile (the same "
                                "training). Off: on a 2-core AMX CPU a bare bf16 step ran 1.66x faster compiled, the "
                                "trainer's 150 steps not at all (1.0x; benchmarks/results/sft_compile.json).")
    ddp_find_unused_parameters: bool | None = Field(default=None, description=DDP_FIND_UNUSED_HELP)
    attention: AttentionKernel = Field(default="auto", description=ATTENTION_HELP)
    scored_positions: ScoredPositions = Field(default="labelled", description=SCORED_POSITIONS_HELP)

    OPERATIONAL: ClassVar[frozenset[str]] = frozenset({"torch_compile", "ddp_find_unused_parameters",
                                                       "pad_to_multiple_of", "attention",
                                                       "scored_positions"})
    """Fields that change how a run executes, not what it trains: not part of a model version's id."""

    def spec(self) -> TinyStudentSpec:
        """The size of the student built here."""
        return self.student_spec or STUDENT_PRESETS[self.base_model]

    def batch_layout(self, processes: int) -> tuple[int, int]:
        """(examples per forward pass on each process, accumulation steps) that make ``batch_size`` examples per
        optimizer step over ``processes`` data-parallel processes: the same training on one process or several."""
        per_process, rest = divmod(self.batch_size, processes)
        if rest or per_process == 0:
            raise ValueError(f"batch_size {self.batch_size} cannot be split evenly over {processes} processes")
        per_device = min(self.per_device_batch_size, per_process)
        accumulation, rest = divmod(per_process, per_device)
        if rest:
            raise ValueError(f"{per_process} examples per process per step are not a multiple of "
                             f"per_device_batch_size {per_device}")
        return per_device, accumulation
