"""Two policies game by game: the paired counts come from the games both played, and the exact McNemar p is the
binomial tail of the discordant games."""

from __future__ import annotations

from pathlib import Path

import pytest

from evoharness.collection import CollectionConfig, collect
from evoharness.evaluation.compare import PairedOutcome, paired_outcomes
from warehouse import Warehouse


@pytest.fixture(scope="module")
def two_policies(tmp_path_factory: pytest.TempPathFactory, alfworld_data: Path) -> Path:
    """The expert on 4 train games (won), and 'looper': the expert's 3-step episodes of 3 of them (lost), stored
    as a second policy at the same 70-step budget."""
    db = tmp_path_factory.mktemp("compare") / "w.duckdb"
    with Warehouse(db) as wh:
        for budget in (70, 3):
            collect(CollectionConfig(split="train", limit=4, max_steps=budget, workers=0, engine="fast"), wh,
                    run_id="test")
        wh.con.execute("UPDATE episodes SET teacher = 'looper', max_steps = 70 WHERE max_steps = 3 AND game_id IN "
                       "(SELECT game_id FROM episodes WHERE max_steps = 3 ORDER BY game_id LIMIT 3)")
    return db


def test_paired_counts_are_over_the_games_both_played(two_policies: Path) -> None:
    with Warehouse(two_policies) as wh:
        [train] = paired_outcomes(wh, "expert", "looper")
        assert paired_outcomes(wh, "expert", "looper", max_steps=50) == []
    assert (train.split, train.games, train.both_won, train.only_policy, train.only_baseline, train.neither) == \
        ("train", 3, 0, 3, 0, 0)
    assert train.success_gain == 1.0 and train.p_value == 0.25  # 2 × (1/2)^3


def test_exact_mcnemar_p() -> None:
    def p(only_policy: int, only_baseline: int) -> float:
        return PairedOutcome("s", 134, 0, only_policy, only_baseline, 0).p_value

    assert p(13, 2) == pytest.approx(2 * (1 + 15 + 105) / 2**15)  # 0.0074: DAgger against its parent, unseen
    assert p(2, 13) == p(13, 2) and p(6, 6) == 1.0 and p(0, 0) == 1.0


def test_cli_prints_the_paired_table(two_policies: Path) -> None:
    from typer.testing import CliRunner

    from evoharness_cli.cli import app

    shown = CliRunner().invoke(app, ["--format", "csv", "compare", "expert", "looper", "--db", str(two_policies)])
    assert shown.exit_code == 0, shown.output
    assert shown.output.splitlines()[-1] == "train,3,0,3,0,0,+100.0%,0.25"
    missing = CliRunner().invoke(app, ["compare", "expert", "nobody", "--db", str(two_policies)])
    assert missing.exit_code == 2 and "played no game to the end" in missing.output
