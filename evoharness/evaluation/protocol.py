"""The results protocol's rule for which splits a new model version is played on (docs/results.md): choices are
made on ``dev``; the held-out splits are played once per final version of a recipe."""

from __future__ import annotations

from collections.abc import Sequence

from evoharness.envs.alfworld.catalog import DEV_SPLIT
from evoharness.evaluation.run import EVAL_SPLITS
from evoharness.training.recipes import variant_overrides

SCREEN_SPLITS = (DEV_SPLIT,)


def protocol_splits(recipe_overrides: Sequence[str]) -> tuple[str, ...]:
    """A version of its recipe as shipped (any seed) is final and plays the held-out splits; a variant (any override
    but a seed: :func:`~evoharness.training.recipes.variant_overrides`) is a screen and plays ``dev`` only, so no
    held-out game decides a choice."""
    return SCREEN_SPLITS if variant_overrides(recipe_overrides) else EVAL_SPLITS
