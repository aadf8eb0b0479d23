"""Consolidation's warehouse reads and writes (through :class:`warehouse.Warehouse`, short transactions).

DuckDB admits one writing process at a time, so callers open the warehouse only around a read or a batch
write (opening waits while another process holds the file).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from warehouse import Warehouse

_JSON_COLUMNS = ("belief_json", "progress_json", "experience_json", "facts_json", "entries_json", "source_episodes",
                 "turn_vars")


def insert_rows(wh: Warehouse, table: str, rows: Sequence[dict[str, Any]]) -> None:
    """Insert dict rows by column name (JSON columns serialised); call inside ``wh.transaction()``."""
    wh.insert(table, rows, json_columns=_JSON_COLUMNS)


@dataclass(frozen=True)
class EpisodeRows:
    """Everything one consolidated episode writes: its ``consolidated_episodes`` row and its child rows."""

    episode: dict[str, Any]
    examples: Sequence[dict[str, Any]] = ()
    belief_checks: Sequence[dict[str, Any]] = ()
    progress_checks: Sequence[dict[str, Any]] = ()


def replace_episodes_rows(wh: Warehouse, consolidator: str, episodes: Sequence[EpisodeRows]) -> None:
    """Replace the consolidation by ``consolidator`` of a batch of episodes; call inside ``wh.transaction()``.

    One DELETE per table for the whole batch (a semi-join on the batch's ids) and one bulk insert per table:
    per-episode deletes scan the table once per episode, which grows quadratically at 50,000 episodes.
    """
    if not episodes:
        return
    ids = pa.table({"episode_id": [e.episode["episode_id"] for e in episodes]})
    wh.con.register("_batch_ids", ids)
    try:
        wh.execute("consolidation_delete_batch", consolidator=consolidator)
    finally:
        wh.con.unregister("_batch_ids")
    insert_rows(wh, "consolidated_episodes", [e.episode for e in episodes])
    insert_rows(wh, "bpe_examples", [row for e in episodes for row in e.examples])
    insert_rows(wh, "belief_checks", [row for e in episodes for row in e.belief_checks])
    insert_rows(wh, "progress_checks", [row for e in episodes for row in e.progress_checks])


def consolidated_ids(wh: Warehouse, teacher: str, consolidator: str) -> set[str]:
    _, rows = wh.query("consolidated_episode_ids", teacher=teacher, consolidator=consolidator)
    return {row[0] for row in rows}
