"""Which positions TRL's fused LM head projects in the training passes of SFT and GRPO.

TRL's trainers give the model a fused LM head (``trl.trainer.utils.add_fused_lm_head``) that returns each labelled
position's log-probability without the full logits. On devices with Triton it projects only the labelled positions;
elsewhere (CPUs among them) it projects every position of the batch through the whole vocabulary in fp32 tiles and
masks the unlabelled ones after, because on compiled-graph devices a varying count of positions would recompile.
A student's turn labels only its completion (about a tenth of an SFT example's tokens, a twentieth of a GRPO turn's),
so on a CPU most of that work is thrown away. ``labelled`` makes the head project only the labelled positions on
every device (the same log-probabilities up to rounding: each position's tile is its own row); ``all`` keeps TRL's
choice. The switch is TRL's private ``_use_triton`` as ``add_fused_lm_head`` reads it (listed in
:mod:`evoharness.training.trl_contract`); the tiles themselves still use Triton only where TRL does.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import trl.trainer.utils as trl_utils

from evoharness.training.trainer_utils import ScoredPositions

_TRL_COMPACT: Callable[[Any], bool] = trl_utils._use_triton


def _every_device(device: Any) -> bool:
    return True


def score_positions(which: ScoredPositions) -> None:
    """Make every fused LM head in this process project ``which`` positions from its next forward pass on."""
    trl_utils._use_triton = _every_device if which == "labelled" else _TRL_COMPACT  # type: ignore[assignment]
