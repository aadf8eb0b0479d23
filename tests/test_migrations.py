"""Migrations cannot drift, migrations keep tables while views are defined once (``warehouse/views/``), and each
metric has one definition shared by every view."""

from __future__ import annotations

import hashlib
import re
import shutil
import subprocess
from datetime import UTC, datetime
from pathlib import Path

import duckdb
import pytest

import warehouse.db as wdb
import warehouse.view_files as wviews
from tests.test_warehouse import _record, _write
from warehouse import MigrationDriftError, Warehouse
from warehouse.drift import ACCEPTED_DRIFT, VIEWS_MOVED
from warehouse.view_files import ViewFileError, view_files

REPO = Path(__file__).resolve().parents[1]
VIEWS_IN_MIGRATIONS_COMMIT = "3bf1e53526f5f58339b99d3a41ae5cd17a13b931"
"""The last commit whose migrations still held the view statements (the texts :data:`VIEWS_MOVED` names)."""


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


# -- views: defined once, in warehouse/views/, applied on every writable open --------------------------------------
_VIEW_STATEMENT = re.compile(r"\bCREATE\s+(OR\s+REPLACE\s+)?(TEMP\w*\s+)?(VIEW|MACRO)\b", re.IGNORECASE)


def _views(con: duckdb.DuckDBPyConnection) -> dict[str, str]:
    return dict(con.execute("SELECT view_name, sql FROM duckdb_views() WHERE NOT internal AND NOT temporary "
                            "ORDER BY view_name").fetchall())


def _columns(con: duckdb.DuckDBPyConnection) -> list[tuple]:
    return con.execute("SELECT table_name, column_name, data_type, is_nullable, column_default "
                       "FROM information_schema.columns WHERE table_name IN (SELECT table_name FROM "
                       "information_schema.tables WHERE table_type = 'BASE TABLE') ORDER BY ALL").fetchall()


def test_migrations_keep_tables_and_every_view_comes_from_its_file(tmp_path: Path) -> None:
    offending = [p.name for p in wdb.migration_files() if _VIEW_STATEMENT.search(p.read_text())]
    assert offending == []
    files = view_files()
    assert [f.file for f in files] == sorted(f.file for f in files) and len(files) >= 20
    with Warehouse(tmp_path / "w.duckdb") as wh:
        assert set(_views(wh.con)) == {f.name for f in files if f.kind == "VIEW"}
        recorded = wh.con.execute("SELECT name, kind, sha256 FROM view_files ORDER BY name").fetchall()
        assert recorded == sorted((f.name, f.kind, f.sha256) for f in files)
        assert wh.scalar("SELECT metric_success_rate(1, 4)") == 0.25  # the macro of 00_metric_success_rate.sql
        assert wh.apply_views() == []  # the files are applied already: nothing is written again


def test_an_edited_view_file_applies_on_open_and_a_removed_one_is_dropped(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    db = tmp_path / "w.duckdb"
    with Warehouse(db):
        pass
    edited = tmp_path / "views"
    shutil.copytree(wviews.VIEWS_DIR, edited)
    (edited / "10_step_kind_counts.sql").unlink()
    target = edited / "20_policy_evaluation.sql"
    target.write_text(target.read_text().replace("AS mean_repeats_lost", "AS mean_repeats_lost,\n    42 AS answer"))
    monkeypatch.setattr(wviews, "VIEWS_DIR", edited)
    with Warehouse(db, read_only=True) as wh:  # a read-only open cannot apply: it reads what was applied last
        assert "answer" not in [d[0] for d in wh.con.execute("SELECT * FROM policy_evaluation").description]
    with Warehouse(db) as wh:
        assert "answer" in [d[0] for d in wh.con.execute("SELECT * FROM policy_evaluation").description]
        assert "step_kind_counts" not in _views(wh.con) and "policy_evaluation" in _views(wh.con)
        wh.con.execute("DROP VIEW lineage")  # dropped by hand: the next open brings it back
    with Warehouse(db) as wh:
        assert "lineage" in _views(wh.con)
    with Warehouse(db, read_only=True) as wh:
        assert "answer" in [d[0] for d in wh.con.execute("SELECT * FROM policy_evaluation").description]


def test_a_view_file_must_define_the_one_view_it_is_named_after(tmp_path: Path) -> None:
    (tmp_path / "10_wrong.sql").write_text("CREATE OR REPLACE VIEW other AS SELECT 1 AS x;\n")
    with pytest.raises(ViewFileError, match=r"10_wrong\.sql: the file must hold exactly one .* wrong"):
        view_files(tmp_path)
    (tmp_path / "10_wrong.sql").unlink()
    (tmp_path / "wrong.sql").write_text("CREATE OR REPLACE VIEW wrong AS SELECT 1 AS x;\n")
    with pytest.raises(ViewFileError, match="<two-digit tier>_<view name>.sql"):
        view_files(tmp_path)


def test_texts_applied_before_the_views_moved_are_accepted(tmp_path: Path) -> None:
    """Without git: a warehouse that recorded the earlier sha256 of a migration whose views moved opens."""
    db = _copied_warehouse(tmp_path)
    moved = {a.name: a for a in VIEWS_MOVED}["065_episode_repeats.sql"]
    with Warehouse(db) as wh:
        wh.con.execute("UPDATE schema_version SET sha256 = ? WHERE version = 65", [moved.sha256])
    with Warehouse(db, read_only=True) as wh:
        assert wh.scalar("SELECT count(*) FROM policy_evaluation") == 0
    with Warehouse(db) as wh:
        assert wh.migrate() == []
        wh.con.execute("UPDATE schema_version SET sha256 = 'x' || ? WHERE version = 65", [moved.sha256[1:]])
    with pytest.raises(MigrationDriftError, match="065_episode_repeats.sql"):
        Warehouse(db)


def _git_show(path: str) -> str:
    try:
        done = subprocess.run(["git", "show", f"{VIEWS_IN_MIGRATIONS_COMMIT}:{path}"], cwd=REPO, capture_output=True,
                              text=True, check=False, timeout=60)
    except OSError:
        pytest.skip("git is not installed")
    if done.returncode != 0:
        pytest.skip(f"commit {VIEWS_IN_MIGRATIONS_COMMIT[:12]} is not in this clone: {done.stderr.strip()}")
    return done.stdout


def _old_migrations() -> dict[int, tuple[str, str]]:
    listing = _git_show("warehouse/migrations/")
    names = sorted(n for n in listing.splitlines() if re.fullmatch(r"\d{3}_\w+\.sql", n))
    return {int(n[:3]): (n, _git_show(f"warehouse/migrations/{n}")) for n in names}


def _statements(sql: str) -> list[str]:
    """The statements of a migration text, comments and layout removed."""
    text = re.sub(r"--[^\n]*", "", sql)
    return [" ".join(s.split()) for s in text.split(";") if s.strip()]


def test_moved_migrations_kept_every_table_statement_as_applied() -> None:
    old = {name: text for name, text in _old_migrations().values()}
    assert {a.name for a in VIEWS_MOVED} == {n for n, text in old.items() if _VIEW_STATEMENT.search(text)}
    for moved in VIEWS_MOVED:
        text = old[moved.name]
        assert hashlib.sha256(text.encode()).hexdigest() == moved.sha256, moved.name
        kept = [s for s in _statements(text) if not _VIEW_STATEMENT.search(s)]
        assert kept == _statements((wdb.MIGRATIONS_DIR / moved.name).read_text()), moved.name
    unchanged = sorted(set(old) - {a.name for a in VIEWS_MOVED})
    assert [(wdb.MIGRATIONS_DIR / n).read_text() for n in unchanged] == [old[n] for n in unchanged]


def test_a_warehouse_made_by_the_migrations_with_views_opens_and_gets_the_view_files(tmp_path: Path) -> None:
    """Built as ``Warehouse.migrate`` did before the move: every old text in order, its sha256 recorded."""
    db = tmp_path / "old.duckdb"
    con = duckdb.connect(str(db))
    con.execute("CREATE TABLE schema_version (version INTEGER PRIMARY KEY, name VARCHAR NOT NULL, "
                "sha256 VARCHAR NOT NULL, applied_at TIMESTAMP NOT NULL)")
    for version, (name, text) in sorted(_old_migrations().items()):
        con.execute(text)
        con.execute("INSERT INTO schema_version VALUES (?, ?, ?, ?)",
                    [version, name, hashlib.sha256(text.encode()).hexdigest(), datetime.now(UTC)])
    old_views = _views(con)
    con.close()
    with Warehouse(db, read_only=True) as wh:  # opens read-only as it is: the views it has are the old ones
        assert _views(wh.con) == old_views
    with Warehouse(tmp_path / "new.duckdb") as fresh:
        fresh_views, fresh_columns = _views(fresh.con), _columns(fresh.con)
    with Warehouse(db) as wh:
        assert wh.con.execute("SELECT count(*) FROM schema_version WHERE version = 80").fetchone() == (1,)
        assert _views(wh.con) == fresh_views and _columns(wh.con) == fresh_columns
        assert wh.apply_views() == []
    with Warehouse(db, read_only=True) as wh:
        assert _views(wh.con) == fresh_views
