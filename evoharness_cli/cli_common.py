"""What every command-line module shares: the console, the ``--db`` option, and table printing."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

console = Console()
DbOption = Annotated[Path | None, typer.Option("--db", help="DuckDB file (default: $EVOHARNESS_DB).")]


def print_table(title: str, columns: list[str], rows: list[tuple]) -> None:
    """A rich table; values that were not computed (NULL) print as NULL, never as 0."""
    table = Table(title=title)
    for column in columns:
        table.add_column(column)
    for row in rows:
        table.add_row(*("NULL" if value is None else str(value) for value in row))
    console.print(table)
