"""Near-duplicate trajectories at scale: MinHash signatures of command bigrams, LSH buckets, exact check.

Each episode's shingles are its command bigrams (with start and end markers). A signature holds, for each
of ``PERMUTATIONS`` hash functions, the smallest hash of any shingle; two episodes agree on one position with
probability equal to their Jaccard similarity. Signatures are cut into ``BANDS`` bands of ``ROWS`` rows;
episodes of the same game sharing a band are candidates, and only candidates are compared exactly (Jaccard
of the shingle sets) against the threshold. A pair at Jaccard 0.9 shares no band with probability
(1 - 0.9^4)^16 ≈ 4e-8, so the result is the all-pairs result in practice, at a cost linear in episodes.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import polars as pl

PERMUTATIONS = 64
BANDS = 16
ROWS = PERMUTATIONS // BANDS
_SEEDS = np.random.default_rng(20251201).integers(1, 2**63, size=PERMUTATIONS, dtype=np.uint64)
_MASK = np.uint64(0xFFFFFFFFFFFFFFFF)


def _mix(x: np.ndarray) -> np.ndarray:
    """splitmix64 finaliser: a well-mixed 64-bit hash of each value (wrapping uint64 arithmetic)."""
    x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return x ^ (x >> np.uint64(31))


def shingles(commands: pl.Series) -> pl.DataFrame:
    """(row, shingle hash) for every command bigram of every row of a list[str] series (null: no commands)."""
    frame = pl.DataFrame({"commands": commands}).with_row_index("row").with_columns(
        pl.concat_list(pl.lit(["<start>"]), pl.col("commands").fill_null([]), pl.lit(["<end>"])).alias("tokens"))
    exploded = frame.select("row", "tokens").explode("tokens")
    pairs = exploded.with_columns(pl.col("tokens").shift(1).over("row").alias("prev")).drop_nulls("prev")
    return pairs.select("row", (pl.col("prev") + "\x1f" + pl.col("tokens")).hash(seed=7).alias("shingle"))


def signatures(shingle_frame: pl.DataFrame, n_rows: int) -> np.ndarray:
    """(n_rows, PERMUTATIONS) uint64 MinHash signatures; every row has at least the start/end bigram."""
    ordered = shingle_frame.sort("row")
    rows = ordered["row"].to_numpy()
    values = ordered["shingle"].to_numpy().astype(np.uint64)
    starts = np.searchsorted(rows, np.arange(n_rows))
    out = np.empty((n_rows, PERMUTATIONS), dtype=np.uint64)
    with np.errstate(over="ignore"):
        for k, seed in enumerate(_SEEDS):
            out[:, k] = np.minimum.reduceat(_mix(values ^ seed), starts)
    return out


def band_keys(sig: np.ndarray) -> np.ndarray:
    """(n_rows, BANDS) uint64 keys: one hash of each band's ROWS signature values."""
    keys = np.zeros((sig.shape[0], BANDS), dtype=np.uint64)
    with np.errstate(over="ignore"):
        for b in range(BANDS):
            acc = np.full(sig.shape[0], np.uint64(b + 1), dtype=np.uint64)
            for r in range(ROWS):
                acc = _mix(acc ^ sig[:, b * ROWS + r])
            keys[:, b] = acc
    return keys


def near_duplicates(games: Sequence[str], commands: pl.Series, threshold: float) -> np.ndarray:
    """Boolean mask: True where a row is a near duplicate (Jaccard >= ``threshold`` of command bigrams) of
    an earlier kept row of the same game. Rows are taken in the given order, as the greedy all-pairs scan
    does: a row similar only to dropped rows is kept."""
    n = len(games)
    dropped = np.zeros(n, dtype=bool)
    if n == 0:
        return dropped
    frame = shingles(commands)
    keys = band_keys(signatures(frame, n)).tolist()
    grouped = frame.group_by("row").agg(pl.col("shingle").unique()).sort("row")
    sets: list[frozenset[int]] = [frozenset(s) for s in grouped["shingle"].to_list()]
    game_index: dict[str, int] = {}
    games_i = [game_index.setdefault(g, len(game_index)) for g in games]
    buckets: dict[tuple[int, int, int], list[int]] = {}
    for i in range(n):
        own = [(games_i[i], b, key) for b, key in enumerate(keys[i])]
        mine, size = sets[i], len(sets[i])
        seen: set[int] = set()
        for key in own:
            for j in buckets.get(key, ()):
                if j in seen:
                    continue
                seen.add(j)
                common = len(mine & sets[j])
                if common / (size + len(sets[j]) - common) >= threshold:
                    dropped[i] = True
                    break
            if dropped[i]:
                break
        if not dropped[i]:
            for key in own:
                buckets.setdefault(key, []).append(i)
    return dropped
