"""A GRPO curriculum: the train games a policy lost, drawn as GRPO's games, named on the settings (so on the model
version), never a held-out game."""

from __future__ import annotations

from pathlib import Path

import pytest

from evoharness.collection import CollectionConfig, collect
from evoharness.training.curriculum import lost_train_games, with_curriculum
from evoharness.training.grpo import training_games
from evoharness.training.grpo_config import GRPOSettings
from tests.conftest import tiny_grpo_settings
from warehouse import Warehouse

SHORT = 3  # a budget in which the expert wins none of these games


@pytest.fixture(scope="module")
def played(tmp_path_factory: pytest.TempPathFactory, alfworld_data: Path) -> Path:
    """The expert on 4 train games with a full budget (won) and with a 3-step budget (lost)."""
    db = tmp_path_factory.mktemp("curriculum") / "w.duckdb"
    with Warehouse(db) as wh:
        for budget in (70, SHORT):
            collect(CollectionConfig(split="train", limit=4, max_steps=budget, workers=0, engine="fast"), wh,
                    run_id="test")
    return db


def test_lost_games_are_the_ones_lost_at_that_budget(played: Path) -> None:
    with Warehouse(played) as wh:
        won_at_70 = wh.scalar("SELECT count(*) FILTER (won) FROM episodes WHERE max_steps = 70")
        lost = lost_train_games(wh, "expert", SHORT)
        assert won_at_70 == 4 and len(lost) == 4
        with pytest.raises(LookupError, match="no train game that 'expert' played at 70 steps and lost"):
            lost_train_games(wh, "expert", 70)
        with pytest.raises(LookupError, match="--split train"):
            lost_train_games(wh, "someone else", SHORT)


def test_the_curriculum_draws_from_its_own_first_games_only(played: Path, catalog) -> None:
    """A policy that played more train games than a curriculum's limit (a larger curriculum's screen, a DAgger
    relabelling) gives that curriculum only the games it lost among the limit's first ones."""
    first_two = [g.game_id for g in catalog.games("train", 2)]
    with Warehouse(played) as wh:
        assert lost_train_games(wh, "expert", SHORT, limit=2) == sorted(first_two)
        assert len(lost_train_games(wh, "expert", SHORT)) == 4
        assert with_curriculum(wh, tiny_grpo_settings(episode_steps=SHORT), "expert", limit=2).games == sorted(
            first_two)
        with pytest.raises(LookupError, match="no train game among the first 2 that 'expert' played at 70 steps"):
            lost_train_games(wh, "expert", 70, limit=2)


def test_grpo_draws_only_the_lost_games_and_names_them(played: Path) -> None:
    from evoharness.training.model_versions import version_id

    settings = tiny_grpo_settings(episode_steps=SHORT)
    with Warehouse(played) as wh:
        lost = lost_train_games(wh, "expert", SHORT)
        curriculum = with_curriculum(wh, settings, "expert")
    assert curriculum.games == lost and curriculum.games_from == "expert" and curriculum.games_limit is None
    assert training_games(curriculum) == lost
    assert len(training_games(settings)) == settings.games_limit  # without: the catalog's first games_limit
    assert version_id("expert", "grpo", "p", curriculum) != version_id("expert", "grpo", "p", settings)


def test_a_held_out_game_is_refused_as_a_training_game(catalog) -> None:
    held_out = catalog.games("valid_unseen", 1)[0].game_id
    train = catalog.games("train", 1)[0].game_id
    with pytest.raises(ValueError, match="train games only"):
        training_games(GRPOSettings(games=[train, held_out]))
    with pytest.raises(ValueError, match="give one"):
        GRPOSettings(games=[train], games_limit=4)
