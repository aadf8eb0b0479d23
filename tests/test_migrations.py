"""Migrations cannot drift, and each metric has one definition shared by every view."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

import warehouse.db as wdb
from tests.test_warehouse import _record, _write
from warehouse import MigrationDriftError, Warehouse
from warehouse.drift import ACCEPTED_DRIFT


def _copied_warehouse(tmp_path: Path) -> Path:
    source = tmp_path / "original.duckdb"
    with Warehouse(source):
        pass
    return Path(shutil.copy(source, tmp_path / "copy.duckdb"))


def test_tampered_migration_file_is_a_clear_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    db = _copied_warehouse(tmp_path)
    tampered = tmp_path / "migrations"
    shutil.copytree(wdb.MIGRATIONS_DIR, tampered)
    target = tampered / "026_model_versions.sql"
    target.write_text(target.read_text().replace("steps               INTEGER NOT NULL",
                                                 "steps               BIGINT NOT NULL"))
    monkeypatch.setattr(wdb, "MIGRATIONS_DIR", tampered)
    with pytest.raises(MigrationDriftError, match=r"026_model_versions\.sql \(version 26\) was applied with sha256"):
        Warehouse(db)
    with pytest.raises(MigrationDriftError, match="026_model_versions.sql"):
        Warehouse(db, read_only=True)  # reading is refused too: the schema is not the one the files describe
    monkeypatch.undo()
    with Warehouse(db) as wh:  # the untouched files open it again: nothing was written by the refusals
        assert wh.migrate() == []


def test_tampered_record_and_missing_file_are_errors(tmp_path: Path) -> None:
    db = _copied_warehouse(tmp_path)
    with Warehouse(db) as wh:
        wh.con.execute("UPDATE schema_version SET sha256 = 'feed' || sha256[5:] WHERE version = 22")
    with pytest.raises(MigrationDriftError, match=r"022_curation\.sql .* sha256 feed"):
        Warehouse(db)
    db = _copied_warehouse(tmp_path)
    with Warehouse(db) as wh:
        wh.con.execute("INSERT INTO schema_version VALUES (35, '035_gone.sql', 'abc', now())")
    with pytest.raises(MigrationDriftError, match=r"035_gone\.sql \(version 35\) was applied but its file is gone"):
        Warehouse(db)


def test_known_superseded_texts_of_027_and_029_are_accepted(tmp_path: Path) -> None:
    """Warehouses of earlier sessions applied the first 027 text and 029; 031 redefines that view."""
    db = _copied_warehouse(tmp_path)
    first_027, retired_029 = ACCEPTED_DRIFT
    with Warehouse(db) as wh:
        wh.con.execute("UPDATE schema_version SET sha256 = ? WHERE version = 27", [first_027.sha256])
        wh.con.execute("INSERT INTO schema_version VALUES (29, ?, ?, now())", [retired_029.name, retired_029.sha256])
    with Warehouse(db) as wh:
        assert wh.migrate() == []
        assert "policy_kind" in [d[0] for d in wh.con.execute("SELECT * FROM policy_evaluation").description]
    with Warehouse(db) as wh:  # a different 027 text is still an error
        wh.con.execute("UPDATE schema_version SET sha256 = 'x' || ? WHERE version = 27", [first_027.sha256[1:]])
    with pytest.raises(MigrationDriftError, match="027_policy_evaluation.sql"):
        Warehouse(db)


def test_success_rate_means_the_same_in_every_view(warehouse: Warehouse, catalog) -> None:
    """won / finished episodes: a failed episode (the policy could not be run) is not a loss."""
    games = catalog.games("valid_seen", limit=3)
    _write(warehouse, _record(games[0]), "r")
    _write(warehouse, _record(games[1], won=False), "r")
    _write(warehouse, _record(games[2], status="failed", won=False, n_steps=1), "r")
    rates = {
        "episode_summary": warehouse.con.execute(
            "SELECT sum(won) / sum(episodes - failed) FROM episode_summary").fetchone()[0],
        "teacher_costs": warehouse.scalar("SELECT success_rate FROM teacher_costs"),
        "policy_evaluation": warehouse.scalar(
            "SELECT success_rate FROM policy_evaluation WHERE task_type = 'ALL'"),
        "teacher_summary": {r[0]: r[4] for r in warehouse.query(
            "teacher_summary", teacher="expert", mode="bpe", split="valid_seen")[1]}["ALL"],
    }
    assert rates == dict.fromkeys(rates, 0.5)
    per_type = warehouse.con.execute("SELECT success_rate FROM episode_summary ORDER BY task_type").fetchall()
    assert sorted(r[0] for r in per_type if r[0] is not None) == [0.0, 1.0]
    assert None in [r[0] for r in per_type]  # only a failed episode: nothing finished, the rate is NULL
