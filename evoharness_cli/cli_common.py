"""What every command-line module shares: the console, the ``--db`` option, table printing (for people, or
``--format json|csv`` for machines), progress lines, and one clear line for every bad input."""

from __future__ import annotations

import csv
import json
import re
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any

import typer
from pydantic import ValidationError
from rich.console import Console
from rich.measure import Measurement
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

console = Console(soft_wrap=True)
DbOption = Annotated[Path | None, typer.Option("--db", help="DuckDB file (default: $EVOHARNESS_DB).")]

EXIT_ERROR = 1
"""A command that failed: bad input, a failed preflight, a tripped circuit breaker, nothing succeeded."""
EXIT_STOPPED = 3
"""A run stopped early at a spend cap: what it stored is kept; raise the cap and rerun to resume."""


class OutputFormat(StrEnum):
    TABLE = "table"
    JSON = "json"
    CSV = "csv"


_output = {"format": OutputFormat.TABLE}


def set_output_format(fmt: OutputFormat) -> None:
    """``json``/``csv``: tables go to stdout as data, everything said to people goes to stderr."""
    _output["format"] = fmt
    console.stderr = fmt is not OutputFormat.TABLE


def print_table(title: str, columns: list[str], rows: list[tuple]) -> None:
    """A table with its header; values that were not computed (NULL) print as NULL, never as 0.

    For people it is a rich table, as wide as its content when output is not a terminal (never cut to
    80 columns); ``--format json`` writes one JSON object per table, ``--format csv`` a header and rows."""
    fmt = _output["format"]
    if fmt is OutputFormat.JSON:
        data = {"table": title, "columns": columns, "rows": [list(row) for row in rows]}
        sys.stdout.write(json.dumps(data, default=str) + "\n")
        return
    if fmt is OutputFormat.CSV:
        writer = csv.writer(sys.stdout, lineterminator="\n")
        writer.writerow(columns)
        writer.writerows(["NULL" if value is None else value for value in row] for row in rows)
        return
    table = Table(title=title)
    for column in columns:
        table.add_column(column)
    for row in rows:
        table.add_row(*("NULL" if value is None else str(value) for value in row))
    if console.is_terminal:
        console.print(table)
        return
    # a pipe or a file: as wide as the content, never cut to 80 columns
    width = max(console.width, Measurement.get(console, console.options.update_width(100_000), table).maximum)
    Console(file=console.file, width=width, color_system=None).print(table)


def fail(message: str, code: int = EXIT_ERROR) -> typer.Exit:
    """Print ``message`` as one error line on stderr; raise the returned exit (``raise fail(...)``)."""
    Console(stderr=True, highlight=False, soft_wrap=True).print(f"error: {message}", markup=False)
    return typer.Exit(code)


def user_errors() -> tuple[type[BaseException], ...]:
    """Errors that mean bad input or an unusable setup: printed as one line, never as a traceback."""
    from evoharness.collection import CollectionConfigError
    from evoharness.envs.alfworld.catalog import AlfworldDataError
    from evoharness.teachers.preflight import PreflightError
    from evoharness.teachers.registry import MissingCredentialsError, RegistryError
    from warehouse import WarehouseOpenError

    return (CollectionConfigError, AlfworldDataError, PreflightError, MissingCredentialsError, RegistryError,
            WarehouseOpenError)


_UNESCAPED_BRACKET = re.compile(r"(?<!\\)\[")


def _escape_help(command: Any) -> None:
    """Show ``[default: …]`` written in help texts instead of letting rich markup swallow it (a stray " .")."""
    for param in command.params:
        help_text = getattr(param, "help", None)
        if help_text:
            param.help = _UNESCAPED_BRACKET.sub(r"\\[", help_text)  # type: ignore[attr-defined]
    for sub in getattr(command, "commands", {}).values():
        _escape_help(sub)


class SafeGroup(typer.core.TyperGroup):
    """The top-level command group: known user errors become one line on stderr and exit code 1."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        _escape_help(self)

    def invoke(self, ctx: typer.Context) -> Any:  # type: ignore[override]
        try:
            return super().invoke(ctx)
        except user_errors() as exc:
            raise fail(str(exc).splitlines()[0] if str(exc) else type(exc).__name__) from None


ProgressUpdate = Callable[[int, int | None, str], None]


@contextmanager
def progress_reporter(label: str, unit: str = "episodes", every_s: float = 10.0) -> Iterator[ProgressUpdate]:
    """``update(done, total, info)``: a live bar on a terminal; otherwise a line with count, rate and ETA at
    most every ``every_s`` seconds (and for the first and the last item), so logs show a long job moving."""
    if console.is_terminal:
        columns = [TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                   TextColumn("{task.fields[info]}")]
        with Progress(*columns, console=console) as progress:
            task = progress.add_task(label, total=None, info="")

            def update_bar(done: int, total: int | None, info: str) -> None:
                progress.update(task, completed=done, total=total, info=info)

            yield update_bar
        return
    started = time.monotonic()
    last = {"at": -every_s, "done": -1}

    def update_lines(done: int, total: int | None, info: str) -> None:
        now = time.monotonic() - started
        final = total is not None and done >= total
        if done == last["done"] or (now - last["at"] < every_s and not final and last["done"] >= 0):
            return
        last["at"], last["done"] = now, done
        rate = done / now if now > 0 else 0.0
        parts = [f"{label}: {done}/{total if total is not None else '?'} {unit}"]
        if total:
            parts.append(f"({100 * done / total:.0f}%)")
        parts.append(f"{rate:.2f} {unit}/s" if rate >= 0.1 else f"{60 * rate:.2f} {unit}/min")
        if total and rate > 0 and not final:
            parts.append(f"ETA {format_seconds((total - done) / rate)}")
        parts.append(f"elapsed {format_seconds(now)}")
        console.print(" ".join(parts) + (f" | {info}" if info else ""), markup=False, highlight=False,
                      soft_wrap=True)

    yield update_lines


def quiet_third_party() -> None:
    """No Hugging Face progress bars or info logs in a command's own output (it reports progress itself)."""
    import logging
    import os
    import warnings

    os.environ.setdefault("HF_DATASETS_DISABLE_PROGRESS_BARS", "1")
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    try:
        import datasets

        datasets.disable_progress_bars()
        datasets.logging.set_verbosity_error()
    except ImportError:  # pragma: no cover - datasets is a dependency
        pass
    for name in ("datasets", "transformers", "trl", "huggingface_hub", "accelerate"):
        logging.getLogger(name).setLevel(logging.ERROR)
        warnings.filterwarnings("ignore", category=FutureWarning, module=name)
        warnings.filterwarnings("ignore", category=UserWarning, module=name)


def format_seconds(seconds: float) -> str:
    seconds = round(seconds)
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}h{minutes:02d}m" if hours else f"{minutes}m{secs:02d}s" if minutes else f"{secs}s"


def validation_message(exc: ValidationError) -> str:
    """Field and rule of each error, never the offending value (it might be a pasted key)."""
    return "; ".join(f"{'.'.join(str(p) for p in err['loc']) or 'entry'}: {err['msg']}" for err in exc.errors())
