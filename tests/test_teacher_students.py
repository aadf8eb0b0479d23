"""A teacher's students side by side and the one to use (view teacher_students): the version that won the most of
the whole dev split, a tie going to the earlier version; a version that has not played every dev game is not ranked,
and held-out play never decides."""

from __future__ import annotations

import json
from datetime import datetime, timedelta
from pathlib import Path

import pytest

from evoharness.collection import CollectionConfig, collect
from warehouse import Warehouse

DEV_GAMES = 4


def _version(wh: Warehouse, name: str, stage: str, parent: str | None, minutes: int) -> None:
    created = datetime(2026, 1, 1) + timedelta(minutes=minutes)
    wh.insert("model_versions", [{
        "model_version": name, "stage": stage, "teacher": "t", "dataset_id": "d", "parent_version": parent,
        "base_model": "tiny", "path": f"/models/{name}", "settings": {}, "train_examples": 1,
        "validation_examples": 0, "steps": 1, "parameters": 1, "seconds": 1.0, "loss_history": [],
        "eval_history": [], "created_at": created, "code_version": "test", "run_id": "test"}],
        json_columns=("settings", "loss_history", "eval_history"))


def _plays(wh: Warehouse, version: str, split: str, won: int, games: int | None = None) -> None:
    """The expert's episodes of ``split`` stored again as ``version``'s, the first ``won`` of them won."""
    wh.con.execute(
        "INSERT INTO episodes SELECT * REPLACE (episode_id || $v AS episode_id, $v AS teacher, 'student' AS "
        "policy_kind, $v AS model_version, row_number() OVER (ORDER BY game_id) <= $won AS won) FROM episodes "
        "WHERE teacher = 'expert' AND split = $split ORDER BY game_id LIMIT $games",
        {"v": version, "won": won, "split": split, "games": games or DEV_GAMES})


@pytest.fixture(scope="module")
def students_db(tmp_path_factory: pytest.TempPathFactory, alfworld_data: Path) -> Path:
    """Teacher t's SFT student (3 of 4 dev games), its GRPO child (2 of 4, but more held-out games), a second child
    tied with the SFT student on dev, and a third that has played only 3 of the 4 dev games (all won)."""
    db = tmp_path_factory.mktemp("students") / "w.duckdb"
    with Warehouse(db) as wh:
        for split in ("dev", "valid_unseen"):
            collect(CollectionConfig(split=split, limit=DEV_GAMES, workers=0, engine="fast"), wh, run_id="test")
        _version(wh, "t-sft", "sft", None, 0)
        _version(wh, "t-grpo-a", "grpo", "t-sft", 1)
        _version(wh, "t-grpo-b", "grpo", "t-sft", 2)
        _version(wh, "t-grpo-c", "grpo", "t-sft", 3)
        for version, dev_won, unseen_won in (("t-sft", 3, 1), ("t-grpo-a", 2, 4), ("t-grpo-b", 3, 2)):
            _plays(wh, version, "dev", dev_won)
            _plays(wh, version, "valid_unseen", unseen_won)
        _plays(wh, "t-grpo-c", "dev", 3, games=3)
    return db


def test_the_student_to_use_is_the_best_on_the_whole_dev_split(students_db: Path) -> None:
    with Warehouse(students_db) as wh:
        columns, rows = wh.query("teacher_students_for", teacher="t")
        assert wh.query("teacher_students_for", teacher="nobody")[1] == []
    ranked = [dict(zip(columns, row)) for row in rows]
    assert [(r["model_version"], r["dev_success"], r["dev_rank"]) for r in ranked] == [
        ("t-sft", 0.75, 1), ("t-grpo-b", 0.75, 2), ("t-grpo-a", 0.5, 3), ("t-grpo-c", 1.0, None)]
    assert ranked[2]["valid_unseen_success"] == 1.0  # held-out play does not choose
    assert ranked[0]["parent_version"] is None and ranked[1]["parent_version"] == "t-sft"


def test_cli_prints_a_teachers_students(students_db: Path) -> None:
    from typer.testing import CliRunner

    from evoharness_cli.cli import app

    shown = CliRunner().invoke(app, ["--format", "json", "students", "--teacher", "t", "--db", str(students_db)])
    assert shown.exit_code == 0, shown.output
    table = json.loads(shown.stdout.splitlines()[-1])
    assert [row[1] for row in table["rows"]][:1] == ["t-sft"] and table["columns"][-1] == "dev_rank"
    missing = CliRunner().invoke(app, ["students", "--teacher", "nobody", "--db", str(students_db)])
    assert missing.exit_code == 2 and "no student of nobody has been evaluated" in missing.output
