"""Lineage values stamped on every warehouse row: code version and run id."""

from __future__ import annotations

import subprocess
import uuid
from functools import cache
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path


@cache
def code_version() -> str:
    """``<package version>+g<git sha>[.dirty]`` when run from a checkout, else the package version."""
    try:
        base = version("evoharness")
    except PackageNotFoundError:
        base = "0+unknown"
    root = Path(__file__).resolve().parents[1]
    try:
        sha = subprocess.run(
            ["git", "-C", str(root), "rev-parse", "--short=12", "HEAD"], capture_output=True, text=True, check=True
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no"],
            capture_output=True, text=True, check=True,
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return base
    return f"{base}+g{sha}{'.dirty' if dirty else ''}"


def new_run_id() -> str:
    """A run id for work started outside Dagster (Dagster runs use their own run id)."""
    return f"cli-{uuid.uuid4().hex[:16]}"
