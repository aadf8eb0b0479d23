"""The DuckDB warehouse: SQL migrations in ``migrations/``, views, and the single writer path."""

from warehouse.db import (
    DEFAULT_DB_PATH,
    Warehouse,
    WarehouseOpenError,
    default_db_path,
    episode_row,
    load_query,
)

__all__ = ["DEFAULT_DB_PATH", "Warehouse", "WarehouseOpenError", "default_db_path", "episode_row", "load_query"]
