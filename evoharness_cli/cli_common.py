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
from rich.console import Console
from rich.measure import Measurement
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from evoharness.errors import known_failure_line, validation_message  # noqa: F401 (re-exported for commands)

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
    """The top-level command group: every command (sub-groups and commands added later included) shows a known
    failure (:func:`evoharness.errors.known_failure_line`: the library's errors, migration drift, a warehouse
    locked past its wait, an unknown id, invalid settings) as ``error: <one line>`` on stderr with exit code
    1; any other exception is a bug and keeps its traceback."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        _escape_help(self)

    def invoke(self, ctx: typer.Context) -> Any:  # type: ignore[override]
        try:
            return super().invoke(ctx)
        except Exception as exc:
            line = known_failure_line(exc)
            if line is None:
                raise  # a bug: its traceback is the report
            raise fail(line) from None


ProgressUpdate = Callable[[int, int | None, str], None]


class LineProgress:
    """Progress as plain lines (a log, a pipe): ``self(done, total, info)`` prints count, rate and ETA at most
    every ``every_s`` seconds (and for the first and the last item).

    Counts, rate and ETA are of the current phase: :meth:`phase` starts a new one (the next split of an
    evaluation, whose ``done`` starts again from 1), timed from the previous phase's last update (when that
    phase ended and this one began). The rate is the throughput since the phase's first finished item, so
    neither the warm-up nor the filling of the episodes in flight is taken for the pace of the rest; until a
    second item finishes it is ``done`` over the phase's time."""

    def __init__(self, label: str, unit: str = "episodes", every_s: float = 10.0,
                 clock: Callable[[], float] = time.monotonic,
                 write: Callable[[str], None] | None = None) -> None:
        self.label, self.unit, self.every_s, self.clock = label, unit, every_s, clock
        self.write = write or (lambda text: console.print(text, markup=False, highlight=False,
                                                          soft_wrap=True))
        self.name = ""
        self.started = self.phase_started = self.last_update = clock()
        self.first: tuple[float, int] | None = None  # (time, done) of the phase's first update
        self.printed_at: float | None = None
        self.printed_done = -1

    def phase(self, name: str) -> None:
        """Measure from here on as a new phase called ``name`` (its counts start again)."""
        self.name = name
        self.phase_started = self.last_update
        self.first, self.printed_at, self.printed_done = None, None, -1

    def __call__(self, done: int, total: int | None, info: str = "") -> None:
        now = self.clock()
        self.last_update = now
        if self.first is None:
            self.first = (now, done)
        final = total is not None and done >= total
        due = self.printed_at is None or now - self.printed_at >= self.every_s
        if done == self.printed_done or not (due or final):
            return
        self.printed_at, self.printed_done = now, done
        self.write(self.line(done, total, info, now))

    def rate(self, done: int, now: float) -> float:
        """Items per second in this phase (see the class docstring)."""
        if self.first is not None and done > self.first[1] and now > self.first[0]:
            return (done - self.first[1]) / (now - self.first[0])
        elapsed = now - self.phase_started
        return done / elapsed if elapsed > 0 else 0.0

    def line(self, done: int, total: int | None, info: str, now: float) -> str:
        rate = self.rate(done, now)
        label = f"{self.label} {self.name}" if self.name else self.label
        parts = [f"{label}: {done}/{total if total is not None else '?'} {self.unit}"]
        if total:
            parts.append(f"({100 * done / total:.0f}%)")
        parts.append(f"{rate:.2f} {self.unit}/s" if rate >= 0.1 else f"{60 * rate:.2f} {self.unit}/min")
        remaining = eta_seconds(done, total, rate)
        if remaining is not None:
            parts.append(f"ETA {format_seconds(remaining)}")
        parts.append(f"elapsed {format_seconds(now - self.phase_started)}")
        if self.name:
            parts.append(f"(run {format_seconds(now - self.started)})")
        return " ".join(parts) + (f" | {info}" if info else "")


def eta_seconds(done: int, total: int | None, rate: float) -> float | None:
    """Seconds left for ``total - done`` items at ``rate`` items per second; None when unknown or done."""
    if not total or rate <= 0 or done >= total:
        return None
    return (total - done) / rate


class BarProgress:
    """Progress as a live bar on a terminal; :meth:`phase` starts a bar of its own (own count and time)."""

    def __init__(self, progress: Progress, label: str) -> None:
        self.progress, self.label = progress, label
        self.task = progress.add_task(label, total=None, info="")
        self.updated = False

    def phase(self, name: str) -> None:
        if self.updated:
            self.task = self.progress.add_task("", total=None, info="")
        self.progress.update(self.task, description=f"{self.label} {name}")
        self.updated = False

    def __call__(self, done: int, total: int | None, info: str = "") -> None:
        self.progress.update(self.task, completed=done, total=total, info=info)
        self.updated = True


@contextmanager
def progress_reporter(label: str, unit: str = "episodes", every_s: float = 10.0
                      ) -> Iterator[LineProgress | BarProgress]:
    """``update(done, total, info)``: a live bar on a terminal; otherwise :class:`LineProgress` lines, so logs
    show a long job moving. ``update.phase(name)`` starts a phase timed on its own (e.g. the next split)."""
    if console.is_terminal:
        columns = [TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                   TextColumn("{task.fields[info]}")]
        with Progress(*columns, console=console) as progress:
            yield BarProgress(progress, label)
        return
    yield LineProgress(label, unit, every_s)


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
