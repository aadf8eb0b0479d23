"""Lineage rows for datasets curated before ``dataset_examples`` existed (migration 030).

Such a dataset's saved folder still names every example it holds (``episode_id``, ``consolidator``, ``turn``
per row, split by its train/validation parts), so its ``dataset_examples`` rows can be written afterwards. The
consolidation run of each example is the one whose row holds it in ``bpe_examples`` now (the same run, unless
the episode was consolidated again since).
"""

from __future__ import annotations

import pyarrow as pa

from warehouse import Warehouse, load_query


class BackfillError(RuntimeError):
    """A dataset's lineage cannot be rebuilt (its folder is gone, or its examples are no longer stored)."""


def datasets_without_lineage(wh: Warehouse) -> list[str]:
    """Ids of datasets with no ``dataset_examples`` row."""
    return [r[0] for r in wh.query("datasets_without_lineage")[1]]


def backfill_dataset_examples(wh: Warehouse, dataset_id: str) -> int:
    """Write ``dataset_id``'s ``dataset_examples`` from its saved folder; returns the rows written (0 when it has
    them already). Every example must still be in ``bpe_examples``, else nothing is written."""
    import datasets

    if dataset_id not in datasets_without_lineage(wh):
        return 0
    path = wh.value("dataset_path", dataset_id=dataset_id)
    try:
        loaded = datasets.load_from_disk(path)
    except FileNotFoundError as exc:
        raise BackfillError(f"dataset {dataset_id!r}: its folder {path} is gone, so its examples are unknown") from exc
    parts = [part.select_columns(["episode_id", "consolidator", "turn"]).data.table.append_column(
        "dataset_split", pa.array([split] * len(part))) for split, part in loaded.items()]
    held = pa.concat_tables(parts)
    wh.con.register("_held", held)
    try:
        with wh.transaction():
            written = wh.con.execute(load_query("dataset_examples_backfill"), {"dataset_id": dataset_id}).fetchone()
            if written is None or written[0] != held.num_rows:
                raise BackfillError(f"dataset {dataset_id!r}: {held.num_rows - (written[0] if written else 0)} of "
                                    f"its {held.num_rows} examples are no longer in bpe_examples; nothing written")
    finally:
        wh.con.unregister("_held")
    return held.num_rows
