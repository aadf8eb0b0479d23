"""The results protocol's rule for which splits a new model version is played on (docs/results.md): choices are
made on ``dev`` (which version of a teacher to use among them: view ``teacher_students``), so every version plays it;
the held-out splits are played once per final version of a recipe."""

from __future__ import annotations

from collections.abc import Sequence

from evoharness.envs.alfworld.catalog import DEV_SPLIT
from evoharness.evaluation.run import EVAL_SPLITS
from evoharness.training.recipes import variant_overrides

SCREEN_SPLITS = (DEV_SPLIT,)
FINAL_SPLITS = (DEV_SPLIT, *EVAL_SPLITS)


def protocol_splits(recipe_overrides: Sequence[str]) -> tuple[str, ...]:
    """A version of its recipe as shipped (any seed) is final and plays ``dev`` and the held-out splits; a variant
    (any override but a seed: :func:`~evoharness.training.recipes.variant_overrides`) is a screen and plays ``dev``
    only, so no held-out game decides a choice."""
    return SCREEN_SPLITS if variant_overrides(recipe_overrides) else FINAL_SPLITS
