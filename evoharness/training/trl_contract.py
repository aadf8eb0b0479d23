"""Every TRL internal that the trainers rely on, named in one place and checked against the installed TRL.

``evoharness.training.grpo`` subclasses TRL's ``GRPOTrainer``. Where a public hook serves it is used
(reward functions, ``TrainerCallback``, ``GRPOConfig``, ``unwrap_model_for_generation``, ``use_adapter``);
the rest are private methods and attributes listed below with what would break them. ``check_trl_contract``
compares their signatures with the installed TRL (cheap; the trainer runs it before training and refuses a
TRL that breaks it); ``tests/test_trl_contract.py`` also checks their behaviour (return shapes, the
loss normalization that micro-batching relies on) on a tiny model.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass

TESTED_TRL = ("1.16", "1.17")  # >= first, < second: the range pyproject.toml pins
TESTED_TRANSFORMERS = ("5.24", "6")


@dataclass(frozen=True)
class Internal:
    """A private TRL member the trainer uses: where, the parameters it must accept, and why we need it."""

    owner: str  # "GRPOTrainer" or a module path
    name: str
    parameters: tuple[str, ...]  # leading parameters, in order (after self)
    use: str
    breaks_if: str


INTERNALS: tuple[Internal, ...] = (
    Internal("GRPOTrainer", "_generate_and_score_completions", ("inputs",),
             "overridden: plays whole episodes and returns one sample per turn (no public hook emits a variable "
             "number of samples per prompt: rollout_func must return one completion per prompt)",
             "TRL renames it, stops calling it from _prepare_inputs, or _compute_loss reads a key it does not "
             "return"),
    Internal("GRPOTrainer", "_prepare_inputs", ("generation_batch",),
             "called once per training_step: generates (through the override), shuffles and buffers the batch for "
             "num_iterations",
             "it stops returning the whole generation batch when steps_per_generation is 1"),
    Internal("GRPOTrainer", "_calculate_rewards", ("inputs", "prompts", "completions", "completion_ids_list"),
             "runs the reward functions (each term logged) on the episodes of this process",
             "its arguments change, or it stops gathering across processes: it must return a "
             "(episodes of all processes, reward functions) tensor, sliced back by process index"),
    Internal("GRPOTrainer", "_get_per_token_logps_and_entropies",
             ("model", "input_ids", "attention_mask", "logits_to_keep", "batch_size"),
             "old-policy and reference log-probabilities of the turn samples, in chunks of the micro-batch size",
             "its return shape changes (a tuple whose first item is (samples, logits_to_keep); between TRL 1.7 "
             "and 1.8 it went from 2 to 3 items)"),
    Internal("GRPOTrainer", "_compute_loss", ("model", "inputs"),
             "TRL's clipped loss and KL, called per micro-batch through compute_loss",
             "its normalization per loss type changes (LOSS_NORMALIZATION in grpo.py weights the micro-batches)"),
    Internal("GRPOTrainer", "training_step", ("model", "inputs", "num_items_in_batch"),
             "overridden: forward and backward per micro-batch, gradients synchronized on the last",
             "Trainer's inner loop stops calling it once per optimizer step when gradient_accumulation_steps is 1"),
    Internal("GRPOTrainer", "_load_from_checkpoint", ("resume_from_checkpoint",),
             "trainer_utils.train_resumed: loads a run's final checkpoint (weights or adapters) without training "
             "again (SFT's trainer inherits it from transformers' Trainer too)",
             "it stops loading the weights a checkpoint holds, or is renamed"),
    Internal("trl.trainer.utils", "_use_triton", ("device",),
             "lm_head.score_positions: add_fused_lm_head projects only the labelled positions where it returns "
             "True (SFT's and GRPO's training passes on a CPU)",
             "add_fused_lm_head stops reading it from trl.trainer.utils at call time to choose compact scoring"),
)

ATTRIBUTES = ("num_generations", "scale_rewards", "reward_weights", "reward_func_names", "_metrics", "beta",
              "ref_model", "loss_type", "num_iterations", "_step", "_buffered_inputs", "use_vllm",
              "_last_loaded_step", "vllm_generation", "top_entropy_quantile")
"""Private or undocumented trainer attributes read by the trainer (set in GRPOTrainer.__init__)."""


def _owner(name: str) -> object:
    from trl import GRPOTrainer

    return GRPOTrainer if name == "GRPOTrainer" else __import__(name, fromlist=["_"])


def _version_in(version: str, bounds: tuple[str, str]) -> bool:
    from packaging.version import Version

    return Version(bounds[0]) <= Version(version) < Version(bounds[1])


def check_trl_contract(internals: tuple[Internal, ...] = INTERNALS) -> list[str]:
    """What the installed TRL breaks of the contract (empty: nothing); each entry says what and why it matters."""
    import transformers
    import trl

    problems = []
    if not _version_in(trl.__version__, TESTED_TRL):
        problems.append(f"trl {trl.__version__} is outside the tested range >={TESTED_TRL[0]},<{TESTED_TRL[1]}")
    if not _version_in(transformers.__version__, TESTED_TRANSFORMERS):
        problems.append(f"transformers {transformers.__version__} is outside the tested range "
                        f">={TESTED_TRANSFORMERS[0]},<{TESTED_TRANSFORMERS[1]}")
    for item in internals:
        member = getattr(_owner(item.owner), item.name, None)
        if member is None:
            problems.append(f"{item.owner}.{item.name} is gone; used for: {item.use}; breaks if {item.breaks_if}")
            continue
        found = tuple(p for p in inspect.signature(member).parameters if p != "self")
        if found[:len(item.parameters)] != item.parameters:
            problems.append(f"{item.owner}.{item.name} takes {found}, expected {item.parameters} first; used for: "
                            f"{item.use}; breaks if {item.breaks_if}")
    return problems


def require_trl_contract() -> None:
    """Raise with every broken item when the installed TRL does not meet the contract."""
    problems = check_trl_contract()
    if problems:
        raise RuntimeError("The installed TRL does not match what evoharness's GRPO trainer relies on "
                           "(evoharness/training/trl_contract.py):\n- " + "\n- ".join(problems))
