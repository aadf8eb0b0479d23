"""Small charts for asset metadata, rendered headless with matplotlib."""

from __future__ import annotations

import base64
import io
from collections.abc import Collection, Mapping, Sequence
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt


def bar_chart_png(labels: Sequence[str], values: Sequence[float], title: str, ylabel: str,
                  ylim: tuple[float, float] | None = None) -> bytes:
    """A horizontal-label bar chart as PNG bytes."""
    fig, ax = plt.subplots(figsize=(7, 3.5), dpi=100)
    ax.bar(range(len(values)), values, color="#4c72b0")
    ax.set_xticks(range(len(labels)), labels, rotation=25, ha="right", fontsize=8)
    ax.set_title(title)
    ax.set_ylabel(ylabel)
    if ylim:
        ax.set_ylim(*ylim)
    for i, value in enumerate(values):
        ax.text(i, value, f"{value:.2f}", ha="center", va="bottom", fontsize=8)
    return _png(fig)


def line_chart_png(series: Mapping[str, Sequence[Sequence[float]]], title: str, xlabel: str, ylabel: str) -> bytes:
    """One line per named series of (x, y) points, as PNG bytes (e.g. training and validation loss by step)."""
    fig, ax = plt.subplots(figsize=(7, 3.5), dpi=100)
    for name, points in series.items():
        if points:
            xs, ys = zip(*points, strict=True)
            ax.plot(xs, ys, marker="o" if len(points) < 20 else None, markersize=3, label=name)
    ax.set_title(title)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    return _png(fig)


def panels_chart_png(panels: Mapping[str, Mapping[str, Sequence[Sequence[float]]]], title: str,
                     xlabel: str, log_panels: Collection[str] = ()) -> bytes:
    """Side-by-side line charts sharing the x axis, one per named panel of (x, y) series, as PNG bytes (for
    curves on different scales, e.g. success, calls per episode and reward terms by step); the panels named in
    ``log_panels`` have a log y axis."""
    fig, axes = plt.subplots(1, len(panels), figsize=(4.2 * len(panels), 3.6), dpi=100, squeeze=False)
    for ax, (name, series) in zip(axes[0], panels.items(), strict=True):
        for label, points in series.items():
            if points:
                xs, ys = zip(*points, strict=True)
                ax.plot(xs, ys, marker="o" if len(points) < 30 else None, markersize=3, label=label)
        ax.set_title(name, fontsize=10)
        ax.set_xlabel(xlabel)
        ax.grid(alpha=0.3)
        if ax.lines:
            ax.legend(fontsize=7)
            if name in log_panels:
                ax.set_yscale("log")
    fig.suptitle(title, fontsize=11)
    return _png(fig)


def _png(fig: plt.Figure) -> bytes:
    fig.tight_layout()
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png")
    plt.close(fig)
    return buffer.getvalue()


def markdown_image(png: bytes, alt: str) -> str:
    """Markdown that embeds a PNG inline (Dagster's UI renders it)."""
    return f"![{alt}](data:image/png;base64,{base64.b64encode(png).decode()})"


def save_png(png: bytes, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(png)
    return path


def markdown_table(columns: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    head = "| " + " | ".join(columns) + " |\n|" + "---|" * len(columns)
    body = "\n".join("| " + " | ".join("" if v is None else str(v) for v in row) + " |" for row in rows)
    return f"{head}\n{body}"
