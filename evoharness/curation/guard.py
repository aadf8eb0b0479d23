"""The one rule curation never bends: evaluation games (valid_seen, valid_unseen) never enter training data."""

from __future__ import annotations

from collections.abc import Iterable

from evoharness.envs.alfworld.catalog import EVAL_SPLITS


class EvalLeakError(RuntimeError):
    """An evaluation-split game was about to enter a training dataset."""


def assert_train_only(games: Iterable[tuple[str, str | None]]) -> None:
    """``games`` are (game_id, split as the games table knows it); any non-train split raises."""
    leaks = [(game_id, split) for game_id, split in games
             if split != "train" or game_id.split("/", 1)[0] in EVAL_SPLITS]
    if leaks:
        raise EvalLeakError(f"{len(leaks)} non-train games would enter a training set, e.g. {leaks[:3]}")
