"""The DuckDB warehouse: tables by migration (``migrations/``), views defined once (``views/``, applied on every
writable open), named queries (``queries/``) and the single writer path.

It imports nothing of the ``evoharness`` library: writes take plain rows (column → value mappings).
"""

from warehouse.db import (
    DEFAULT_DB_PATH,
    Warehouse,
    WarehouseLockedError,
    WarehouseOpenError,
    default_db_path,
    load_query,
)
from warehouse.drift import MigrationDriftError

__all__ = ["DEFAULT_DB_PATH", "MigrationDriftError", "Warehouse", "WarehouseLockedError", "WarehouseOpenError",
           "default_db_path", "load_query"]
