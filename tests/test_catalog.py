"""The game catalog: discovery, stable ids, balanced order, and clear errors for bad data."""

import json
import shutil
from pathlib import Path

import pytest

from evoharness.envs.alfworld import make_env
from evoharness.envs.alfworld.catalog import TASK_TYPES, AlfworldDataError, GameCatalog


def test_official_split_sizes(catalog: GameCatalog) -> None:
    assert len(catalog.games("valid_seen")) == 140
    assert len(catalog.games("valid_unseen")) == 134
    assert len(catalog.games("train")) + len(catalog.games("dev")) == 900  # the train games of ../shared/alfworld


def test_dev_is_carved_from_train_by_a_seeded_draw(catalog: GameCatalog, alfworld_data: Path) -> None:
    """25 train games of each task type are dev games: never train games, the same draw every time."""
    dev, train = catalog.games("dev"), catalog.games("train")
    assert [g.task_type for g in dev].count(TASK_TYPES[0]) == 25 and len(dev) == 25 * len(TASK_TYPES)
    assert not {g.game_id for g in dev} & {g.game_id for g in train}
    assert all(g.split == "dev" and g.game_id.startswith("train/") for g in dev)  # ids keep the files' place
    assert [g.game_id for g in GameCatalog(alfworld_data).games("dev")] == [g.game_id for g in dev]
    assert catalog.get(dev[0].game_id).split == "dev"


def test_first_games_cycle_through_task_types(catalog: GameCatalog) -> None:
    first = catalog.games("valid_seen", limit=12)
    assert [g.task_type for g in first] == list(TASK_TYPES) * 2
    assert first == catalog.games("valid_seen", limit=12)  # stable
    assert all(g.game_id.startswith("valid_seen/") and g.game_path.is_file() for g in first)
    assert catalog.get(first[3].game_id) == first[3]


def test_rows_are_relative_and_hashed(catalog: GameCatalog) -> None:
    row = catalog.games("valid_unseen", limit=1)[0].as_row()
    assert not row["game_path"].startswith("/") and len(row["file_sha256"]) == 64
    assert row["objective"] and row["walkthrough_len"] > 0


def test_unknown_split_and_task_type(catalog: GameCatalog) -> None:
    with pytest.raises(ValueError, match="Unknown split 'test'"):
        catalog.games("test")
    with pytest.raises(ValueError, match="Unknown task types"):
        catalog.games("train", task_types=["juggle"])


def test_missing_data_says_what_to_do(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ALFWORLD_DATA", raising=False)
    with pytest.raises(AlfworldDataError, match="ALFWORLD_DATA is not set.*alfworld-download"):
        GameCatalog()
    with pytest.raises(AlfworldDataError, match="No json_2.1.1/ folder"):
        GameCatalog(tmp_path)
    (tmp_path / "json_2.1.1").mkdir()
    with pytest.raises(AlfworldDataError, match="holds no games"):
        GameCatalog(tmp_path).games("train")


def _copy_one_game(catalog: GameCatalog, root: Path) -> Path:
    game = catalog.games("valid_seen", limit=1)[0]
    target = root / "json_2.1.1" / "valid_seen" / game.task_folder / game.trial
    target.mkdir(parents=True)
    for source in (game.game_path, game.traj_path):
        shutil.copy(source, target / source.name)
    return target / "game.tw-pddl"


def test_corrupt_game_file_gets_a_clear_error(catalog: GameCatalog, tmp_path: Path) -> None:
    game_file = _copy_one_game(catalog, tmp_path)
    game = GameCatalog(tmp_path).games("valid_seen")[0]
    game_file.write_text(game_file.read_text()[:500])
    with pytest.raises(AlfworldDataError, match="is corrupt .*alfworld-download"):
        make_env(game, engine="textworld")
    game_file.write_text(json.dumps({"grammar": "x"}))
    with pytest.raises(AlfworldDataError, match="missing pddl_domain, pddl_problem"):
        make_env(game, engine="textworld")
