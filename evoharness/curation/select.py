"""Episode selection in columnar form: quality filters and task-type balance as polars expressions, exact
duplicates by first signature, near duplicates by MinHash LSH (``curation.minhash``).

Input: the ``curation_candidates`` query as a polars frame (one row per consolidated episode, in game order).
The result equals the reference per-episode loops' (``benchmarks/curation_reference.py``), at a cost linear in
episodes.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass

import polars as pl

from evoharness.curation.config import CurationConfig
from evoharness.curation.minhash import near_duplicates

REASON = "reason"
NOT_TRAIN = "not a train-split game"


@dataclass
class ColumnarSelection:
    chosen: pl.DataFrame  # candidate rows kept, ordered by (game_id, episode_id)
    dropped: Counter[str]


def _below(column: str, minimum: float) -> pl.Expr:
    """A metric that could not be computed (NULL) does not fail the episode: there was nothing to get wrong."""
    return pl.col(column).is_not_null() & (pl.col(column) < minimum)


def _filter_reason(config: CurationConfig) -> pl.Expr:
    return (
        pl.when((pl.col("catalog_split") != "train").fill_null(True) | (pl.col("split") != "train"))
        .then(pl.lit(NOT_TRAIN))
        .when(pl.lit(config.require_success) & ~pl.col("won"))
        .then(pl.lit("not successful"))
        .when(_below("belief_precision", config.min_belief_precision)
              | _below("belief_recall", config.min_belief_recall))
        .then(pl.lit("belief accuracy below threshold"))
        .when(_below("progress_validity", config.min_progress_validity))
        .then(pl.lit("progress validity below threshold"))
        .when(_below("parse_validity", config.min_parse_validity))
        .then(pl.lit("parse validity below threshold"))
        .otherwise(pl.lit(None, dtype=pl.String))
    )


def select_columnar(candidates: pl.DataFrame, config: CurationConfig) -> ColumnarSelection:
    """Filters, exact and near duplicates, then the task-type cap (by a stable hash of the episode id): each type
    keeps at most ``balance_factor`` × the train episodes of the type the teacher played least, so a type it plays
    badly does not cut the won episodes of the others."""
    dropped: Counter[str] = Counter()
    frame = candidates.with_row_index("order").with_columns(_filter_reason(config).alias(REASON))
    dropped.update(dict(frame.filter(pl.col(REASON).is_not_null())[REASON].value_counts().iter_rows()))
    kept = frame.filter(pl.col(REASON).is_null())
    exact = pl.col("action_sig").is_not_null() & ~pl.col("action_sig").is_first_distinct()
    dropped["exact duplicate"] += int(kept.select(exact.sum()).item())
    unique = kept.filter(~exact)
    near = near_duplicates(unique["game_id"].to_list(), unique["commands"], config.near_duplicate_jaccard)
    dropped["near duplicate"] += int(near.sum())
    unique = unique.filter(pl.Series(~near))
    cap = config.max_per_task_type
    if cap is None and unique.height:  # balance to the games the teacher played, not to the ones it won
        played = frame.filter(pl.col(REASON).ne_missing(NOT_TRAIN))
        rarest = int(played.group_by("task_type").len()["len"].min())  # type: ignore[arg-type]
        cap = math.ceil(config.balance_factor * rarest)
    ranked = unique.with_columns(pl.col("stable_key").rank("ordinal").over("task_type").alias("rank"))
    chosen = ranked if cap is None else ranked.filter(pl.col("rank") <= cap)
    dropped["task-type balance cap"] += unique.height - chosen.height
    return ColumnarSelection(chosen.sort("game_id", "episode_id").drop("order", REASON, "rank"),
                             Counter({k: v for k, v in dropped.items() if v}))
