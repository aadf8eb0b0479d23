"""Discovers ALFWorld games in the official ``$ALFWORLD_DATA/json_2.1.1/<split>/...`` layout.

The ``dev`` split is carved from the official train games: :data:`DEV_PER_TASK_TYPE` games of each task type by a
seeded draw (at most a sixth of a type's train games). They keep their ids (``train/<task>/<trial>``) but are no
longer ``train`` games: no teacher collection, dataset, DAgger round or GRPO curriculum draws on them, and every
choice of a recipe (learning rate, steps, decoding rules) is made by playing them, so that ``valid_seen`` and
``valid_unseen`` are played once per final version."""

from __future__ import annotations

import hashlib
import json
import os
import random
import re
from collections.abc import Iterable
from dataclasses import asdict, dataclass, replace
from functools import cached_property
from pathlib import Path

SPLITS: tuple[str, ...] = ("train", "dev", "valid_seen", "valid_unseen")
EVAL_SPLITS: frozenset[str] = frozenset({"valid_seen", "valid_unseen"})
"""The held-out splits: never trained on, played once per final version of a recipe."""
DEV_SPLIT = "dev"
DEV_PER_TASK_TYPE = 25
DEV_SEED = 20261205
"""The seed of the dev draw: changing it changes the dev games, and with them every dataset and curriculum."""
TASK_TYPES: tuple[str, ...] = (
    "pick_and_place_simple",
    "look_at_obj_in_light",
    "pick_clean_then_place_in_recep",
    "pick_heat_then_place_in_recep",
    "pick_cool_then_place_in_recep",
    "pick_two_obj_and_place",
)
DATA_VERSION = "json_2.1.1"
GAME_FILE = "game.tw-pddl"
TRAJ_FILE = "traj_data.json"


class AlfworldDataError(RuntimeError):
    """The ALFWorld data is missing, incomplete or corrupt; the message says how to fix it."""


_FIX = (
    "Set ALFWORLD_DATA to the folder that holds json_2.1.1/ (for this project: ../shared/alfworld), "
    "or download the data with `alfworld-download`."
)


@dataclass(frozen=True)
class GameRecord:
    """One game: a stable id ('<split>/<task folder>/<trial>'), its split, task type and files."""

    game_id: str
    split: str
    task_type: str
    task_folder: str
    trial: str
    data_root: str

    @property
    def relative_path(self) -> str:
        return f"{DATA_VERSION}/{self.game_id}/{GAME_FILE}"

    @property
    def game_path(self) -> Path:
        return Path(self.data_root) / self.relative_path

    @property
    def traj_path(self) -> Path:
        return self.game_path.with_name(TRAJ_FILE)

    def load_game_json(self) -> dict:
        """The parsed ``game.tw-pddl``; a clear error when it is unreadable or lacks its keys."""
        return load_game_file(self.game_path)

    def as_row(self) -> dict:
        """The ``games`` table row: catalog fields plus objective, walkthrough length and file sha256."""
        raw = self.game_path.read_bytes()
        data = load_game_file(self.game_path)
        objective = _OBJECTIVE_IN_GRAMMAR_RE.search(data["grammar"])
        row = asdict(self)
        row.pop("data_root")
        row |= {
            "game_path": self.relative_path,
            "objective": objective.group(1) if objective else None,
            "walkthrough_len": len(data.get("walkthrough") or []),
            "file_sha256": hashlib.sha256(raw).hexdigest(),
        }
        return row


_OBJECTIVE_IN_GRAMMAR_RE = re.compile(r'Your task is to: ([^"\\]*)')
_REQUIRED_KEYS = ("pddl_domain", "grammar", "pddl_problem")


def load_game_file(path: Path) -> dict:
    """Parse a ``game.tw-pddl`` file, raising :class:`AlfworldDataError` with the path when it is corrupt."""
    try:
        data = json.loads(Path(path).read_text())
    except FileNotFoundError as exc:
        raise AlfworldDataError(f"Game file {path} does not exist. {_FIX}") from exc
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise AlfworldDataError(
            f"Game file {path} is corrupt (not valid JSON: {exc}). Re-download it with `alfworld-download`."
        ) from exc
    missing = [key for key in _REQUIRED_KEYS if key not in data] if isinstance(data, dict) else list(_REQUIRED_KEYS)
    if missing:
        raise AlfworldDataError(
            f"Game file {path} is corrupt: missing {', '.join(missing)}. Re-download it with `alfworld-download`."
        )
    return data


def check_traj_file(path: Path) -> None:
    """The expert reads ``traj_data.json``: raise :class:`AlfworldDataError` naming it when missing or corrupt."""
    try:
        data = json.loads(Path(path).read_text())
    except FileNotFoundError:
        raise AlfworldDataError(f"The expert needs {path}, which is missing. {_FIX}") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        what = "empty" if not Path(path).read_bytes().strip() else f"not valid JSON: {exc}"
        raise AlfworldDataError(f"Expert data file {path} is corrupt ({what}). Re-download it with "
                                "`alfworld-download`.") from None
    if not isinstance(data, dict):
        raise AlfworldDataError(f"Expert data file {path} is corrupt (not a JSON object). Re-download it with "
                                "`alfworld-download`.")


def resolve_data_root(data_root: str | os.PathLike | None = None) -> Path:
    """The ALFWorld data folder: the argument, else ``$ALFWORLD_DATA``; checked to hold ``json_2.1.1/``."""
    raw = data_root if data_root is not None else os.environ.get("ALFWORLD_DATA")
    if not raw:
        raise AlfworldDataError(f"ALFWORLD_DATA is not set. {_FIX}")
    root = Path(raw).expanduser().resolve()
    if not (root / DATA_VERSION).is_dir():
        raise AlfworldDataError(f"No {DATA_VERSION}/ folder under ALFWORLD_DATA={root}. {_FIX}")
    return root


def _interleave_task_types(games: list[GameRecord]) -> tuple[GameRecord, ...]:
    queues = [[game for game in games if game.task_type == task_type] for task_type in TASK_TYPES]
    ordered: list[GameRecord] = []
    while any(queues):
        for queue in queues:
            if queue:
                ordered.append(queue.pop(0))
    return tuple(ordered)


def _carve_dev(train: tuple[GameRecord, ...]) -> tuple[tuple[GameRecord, ...], tuple[GameRecord, ...]]:
    """(train, dev): ``DEV_PER_TASK_TYPE`` train games of each task type drawn with ``DEV_SEED`` (at most a sixth of
    the type's games) become dev games, in catalog order."""
    rng = random.Random(DEV_SEED)
    drawn: set[str] = set()
    for task_type in TASK_TYPES:
        ids = sorted(game.game_id for game in train if game.task_type == task_type)
        drawn |= set(rng.sample(ids, min(DEV_PER_TASK_TYPE, len(ids) // 6)))
    dev = tuple(replace(game, split=DEV_SPLIT) for game in train if game.game_id in drawn)
    return tuple(game for game in train if game.game_id not in drawn), dev


class GameCatalog:
    """All games under one data root, discovered once.

    A split's games are ordered round-robin over task types (each type in id order), so that "the first
    N games" is both stable and balanced across the six task types.
    """

    def __init__(self, data_root: str | os.PathLike | None = None) -> None:
        self.data_root = resolve_data_root(data_root)

    @cached_property
    def _by_split(self) -> dict[str, tuple[GameRecord, ...]]:
        found: dict[str, tuple[GameRecord, ...]] = {}
        for split in SPLITS:
            if split == DEV_SPLIT:
                continue
            split_dir = self.data_root / DATA_VERSION / split
            games = []
            for game_file in sorted(split_dir.glob(f"*/*/{GAME_FILE}")) if split_dir.is_dir() else []:
                trial_dir = game_file.parent
                task_folder = trial_dir.parent.name
                task_type = task_folder.split("-", 1)[0]
                if task_type not in TASK_TYPES:
                    continue
                games.append(
                    GameRecord(
                        game_id=f"{split}/{task_folder}/{trial_dir.name}",
                        split=split,
                        task_type=task_type,
                        task_folder=task_folder,
                        trial=trial_dir.name,
                        data_root=str(self.data_root),
                    )
                )
            found[split] = _interleave_task_types(games)
        found["train"], found[DEV_SPLIT] = _carve_dev(found["train"])
        if not any(found.values()):
            raise AlfworldDataError(f"ALFWORLD_DATA={self.data_root} holds no games. {_FIX}")
        return found

    def games(self, split: str, limit: int | None = None, task_types: Iterable[str] | None = None) -> list[GameRecord]:
        """Games of one split in catalog order, optionally filtered by task type and truncated to ``limit``."""
        if split not in SPLITS:
            raise ValueError(f"Unknown split {split!r}; expected one of {', '.join(SPLITS)}.")
        games = list(self._by_split[split])
        if not games:
            raise AlfworldDataError(f"Split {split!r} is empty under ALFWORLD_DATA={self.data_root}. {_FIX}")
        if task_types is not None:
            wanted = set(task_types)
            unknown = wanted - set(TASK_TYPES)
            if unknown:
                raise ValueError(f"Unknown task types {sorted(unknown)}; expected some of {TASK_TYPES}.")
            games = [game for game in games if game.task_type in wanted]
        return games[:limit] if limit is not None else games

    def all_games(self) -> list[GameRecord]:
        return [game for split in SPLITS for game in self._by_split[split]]

    @cached_property
    def _by_id(self) -> dict[str, GameRecord]:
        return {game.game_id: game for game in self.all_games()}

    def get(self, game_id: str) -> GameRecord:
        try:
            return self._by_id[game_id]
        except KeyError:
            raise KeyError(f"No game {game_id!r} under ALFWORLD_DATA={self.data_root}.") from None
