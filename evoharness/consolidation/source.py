"""Stored episodes as consolidation input: the episode row plus its steps, read from the warehouse."""

from __future__ import annotations

from dataclasses import dataclass

from warehouse import Warehouse


@dataclass(frozen=True)
class SourceStep:
    t: int
    kind: str
    action: str
    argument: str | None
    think: str
    observation: str
    admissible: bool | None
    done: bool


@dataclass(frozen=True)
class SourceEpisode:
    """A finished episode of any teacher in any mode (``bpe`` or ``react``)."""

    episode_id: str
    teacher: str
    mode: str
    game_id: str
    split: str
    task_type: str
    seed: int
    won: bool
    max_steps: int
    engine: str
    steps: tuple[SourceStep, ...]

    def env_steps(self) -> list[SourceStep]:
        """The environment commands that changed or showed the world (inadmissible no-ops are dropped)."""
        return [s for s in self.steps if s.kind == "env" and s.admissible is not False]

    @property
    def source_notes(self) -> list[str]:
        """Lessons the teacher itself buffered with ``note`` (bpe logs only)."""
        return [s.argument for s in self.steps if s.kind == "note" and s.argument]


def source_rows(wh: Warehouse, teacher: str, splits: tuple[str, ...], modes: tuple[str, ...],
                limit: int | None = None) -> list[tuple]:
    """The first ``limit`` finished episodes of ``teacher`` on ``splits`` in ``modes`` (ordered by game, mode,
    seed, id: a total order, so batch boundaries drawn over it are the same in every run), without steps.

    ``limit`` counts from the start of that order whether or not an episode is already consolidated, so a rerun
    with the same ``limit`` plans the same episodes."""
    _, rows = wh.query("consolidation_source_episodes", teacher=teacher, splits=list(splits), modes=list(modes))
    return rows[:limit]


def load_source_episodes(wh: Warehouse, rows: list[tuple]) -> list[SourceEpisode]:
    """The episodes of ``rows`` (from :func:`source_rows`) with their steps, in the same order."""
    if not rows:
        return []
    ids = [row[0] for row in rows]
    _, step_rows = wh.query("consolidation_source_steps", episode_ids=ids)
    by_episode: dict[str, list[SourceStep]] = {}
    for episode_id, *fields in step_rows:
        by_episode.setdefault(episode_id, []).append(SourceStep(*fields))
    return [
        SourceEpisode(*row, steps=tuple(by_episode.get(row[0], ())))  # type: ignore[misc]
        for row in rows
    ]
