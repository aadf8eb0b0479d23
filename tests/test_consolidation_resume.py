"""Consolidation resumes to the same Experience bank: batch boundaries fixed by episode order, and each batch's
examples committed together with the bank version they induce (issue 30)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from evoharness.consolidation import bank as banks
from evoharness.consolidation.batches import pending_batches
from evoharness.consolidation.config import ConsolidationConfig
from evoharness.consolidation.pipeline import consolidate
from evoharness.consolidation.rules import RuleConsolidator
from tests.test_consolidation import make_episodes
from warehouse import Warehouse

CONFIG = ConsolidationConfig(engine="fast", workers=0, batch_size=3)


def test_batches_are_cut_before_done_episodes_are_left_out() -> None:
    ids = [f"e{i}" for i in range(8)]
    assert pending_batches(ids, set(), 3) == [["e0", "e1", "e2"], ["e3", "e4", "e5"], ["e6", "e7"]]
    assert pending_batches(ids, {"e0", "e1", "e2", "e3"}, 3) == [["e4", "e5"], ["e6", "e7"]]
    assert pending_batches(ids, set(ids), 3) == []
    with pytest.raises(ValueError, match="batch_size"):
        pending_batches(ids, set(), 0)


@pytest.fixture(scope="module")
def episodes_db(tmp_path_factory: pytest.TempPathFactory, alfworld_data: Path) -> Path:
    db = tmp_path_factory.mktemp("resume") / "episodes.duckdb"
    make_episodes(db, games=5)  # 10 episodes: batches of 3, 3, 3, 1
    return db


def _end_state(db: Path) -> tuple[list[tuple], list[tuple], int]:
    with Warehouse(db, read_only=True) as wh:
        versions = wh.con.execute("SELECT version, parent_version, sha256, source_episodes FROM experience_banks "
                                  "ORDER BY version").fetchall()
        examples = wh.con.execute("SELECT episode_id, turn, bank_version, md5(user_prompt || target) FROM bpe_examples "
                                  "ORDER BY episode_id, turn").fetchall()
        edits = int(wh.scalar("SELECT count(*) FROM experience_edits"))
    return versions, examples, edits


def test_a_crash_between_a_batch_and_its_bank_version_resumes_to_the_same_bank(episodes_db: Path,
                                                                                tmp_path: Path) -> None:
    """The third batch's bank write fails (a kill at the worst moment): its examples roll back with it, and the
    rerun ends with the versions, examples and edits of an uninterrupted run."""
    whole = Path(shutil.copy(episodes_db, tmp_path / "whole.duckdb"))
    result = consolidate(CONFIG, whole, RuleConsolidator(), "whole")
    assert result.bank_versions == [1, 2, 3, 4]

    crashed = Path(shutil.copy(episodes_db, tmp_path / "crashed.duckdb"))
    write_version = banks.write_version
    calls: list[int] = []

    def crash_on_third(*args, **kwargs) -> None:  # type: ignore[no-untyped-def]
        calls.append(1)
        if len(calls) == 3:
            raise KeyboardInterrupt("killed while writing the third batch")
        write_version(*args, **kwargs)

    banks.write_version = crash_on_third  # type: ignore[assignment]
    try:
        with pytest.raises(KeyboardInterrupt):
            consolidate(CONFIG, crashed, RuleConsolidator(), "killed")
    finally:
        banks.write_version = write_version  # type: ignore[assignment]
    with Warehouse(crashed, read_only=True) as wh:
        assert wh.scalar("SELECT count(*) FROM consolidated_episodes") == 6  # two whole batches, not the third
        assert wh.scalar("SELECT max(version) FROM experience_banks") == 2
    resumed = consolidate(CONFIG, crashed, RuleConsolidator(), "rerun")
    assert resumed.planned == 4 and resumed.bank_versions == [3, 4]
    assert _end_state(crashed) == _end_state(whole)


def test_a_rerun_with_the_same_limit_plans_the_same_episodes(episodes_db: Path, tmp_path: Path) -> None:
    """``limit`` counts from the start of the game order, done or not: a rerun does not take N more."""
    db = Path(shutil.copy(episodes_db, tmp_path / "limited.duckdb"))
    first = consolidate(CONFIG.model_copy(update={"limit": 4}), db, RuleConsolidator(), "a")
    again = consolidate(CONFIG.model_copy(update={"limit": 4}), db, RuleConsolidator(), "b")
    more = consolidate(CONFIG.model_copy(update={"limit": 7}), db, RuleConsolidator(), "c")
    assert (first.planned, again.planned, more.planned) == (4, 0, 3)
