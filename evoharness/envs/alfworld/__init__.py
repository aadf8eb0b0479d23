"""The ALFWorld domain: game catalog, engines behind the environment protocol, Belief parser."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from evoharness.envs.alfworld.catalog import GameCatalog, GameRecord
from evoharness.envs.base import Environment

EngineName = Literal["textworld", "fast"]
ENGINES: tuple[str, ...] = ("textworld", "fast")
DEFAULT_ENGINE: EngineName = "fast"
SEED_BANK = Path(__file__).resolve().parent / "seed_bank.yaml"  # the hand-written Experience bank, version 0


def make_env(game: GameRecord, engine: str = DEFAULT_ENGINE, expert: bool = False) -> Environment:
    """Open ``game`` on the named engine. ``expert=True`` adds the expert's next command to every result."""
    if engine == "textworld":
        from evoharness.envs.alfworld.textworld_engine import TextWorldAlfworldEnv

        return TextWorldAlfworldEnv(game, expert=expert)
    if engine == "fast":
        from evoharness.envs.alfworld.fast_engine import FastAlfworldEnv

        return FastAlfworldEnv(game, expert=expert)
    raise ValueError(f"Unknown engine {engine!r}; expected one of {', '.join(ENGINES)}.")


__all__ = ["DEFAULT_ENGINE", "ENGINES", "SEED_BANK", "GameCatalog", "GameRecord", "make_env"]
