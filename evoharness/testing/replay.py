"""Replay a played episode's environment commands in the fast engine: the states it passed through."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from evoharness.envs.alfworld.catalog import GameRecord
from evoharness.envs.pool import EnvPool


def state_repeats(game: GameRecord, seed: int, steps: Sequence[tuple[str, str]]) -> int:
    """Environment commands an episode of ``game`` (``steps``: its turns' kind and action) issued again in a state
    it had issued them in: the same last observation and the same admissible commands (``RepeatGuard``'s notion of
    a state), found by replaying the commands."""

    async def replay() -> int:
        pool = EnvPool(workers=0, engine="fast")
        try:
            env, current = await pool.open(game, seed)
            issued: set[tuple[str, str, frozenset[str]]] = set()
            repeats = 0
            for kind, action in steps:
                if kind != "env":
                    continue
                key = (action, current.observation, frozenset(current.admissible_commands))
                repeats += key in issued
                issued.add(key)
                current = await env.step(action)
            await env.release()
            return repeats
        finally:
            pool.close()

    return asyncio.run(replay())
