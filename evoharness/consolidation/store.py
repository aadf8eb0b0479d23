"""Consolidation's warehouse reads and writes (through :class:`warehouse.Warehouse`, short transactions).

DuckDB admits one writing process at a time, so callers open the warehouse only around a read or a batch
write (opening waits while another process holds the file).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from warehouse import Warehouse

_JSON_COLUMNS = ("belief_json", "progress_json", "experience_json", "facts_json", "entries_json", "source_episodes",
                 "turn_vars")


def insert_rows(wh: Warehouse, table: str, rows: Sequence[dict[str, Any]]) -> None:
    """Insert dict rows by column name (JSON columns serialised); call inside ``wh.transaction()``."""
    wh.insert(table, rows, json_columns=_JSON_COLUMNS)


def replace_episode_rows(
    wh: Warehouse, consolidator: str, episode_row: dict[str, Any], examples: Sequence[dict[str, Any]],
    belief_rows: Sequence[dict[str, Any]], progress_rows: Sequence[dict[str, Any]],
) -> None:
    """Replace one episode's consolidation by ``consolidator`` (rows of every table, atomically)."""
    key = [episode_row["episode_id"], consolidator]
    with wh.transaction():
        for table in ("bpe_examples", "belief_checks", "progress_checks", "consolidated_episodes"):
            wh.con.execute(f"DELETE FROM {table} WHERE episode_id = ? AND consolidator = ?", key)
        insert_rows(wh, "consolidated_episodes", [episode_row])
        insert_rows(wh, "bpe_examples", examples)
        insert_rows(wh, "belief_checks", belief_rows)
        insert_rows(wh, "progress_checks", progress_rows)


def consolidated_ids(wh: Warehouse, teacher: str, consolidator: str) -> set[str]:
    rows = wh.con.execute(
        "SELECT episode_id FROM consolidated_episodes WHERE teacher = ? AND consolidator = ? AND status = 'ok'",
        [teacher, consolidator],
    ).fetchall()
    return {row[0] for row in rows}
