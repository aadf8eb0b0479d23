"""Rule-based consolidation on real expert episodes (fast engine), audited in DuckDB views."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from evoharness.collection import CollectionConfig, collect
from evoharness.consolidation.audit import quality_gate
from evoharness.consolidation.config import ConsolidationConfig, QualityThresholds
from evoharness.consolidation.pipeline import consolidate
from evoharness.consolidation.rules import RuleConsolidator
from evoharness.consolidation.subgoals import check_subgoal
from evoharness.envs.base import WorldFacts
from evoharness.harness.grammar import parse_turn
from evoharness.harness.prompts import Mode
from evoharness.teachers.registry import EXPERT, TeacherRegistry
from warehouse import Warehouse

GAMES = 12


def make_episodes(db: Path, games: int = GAMES, split: str = "train") -> None:
    """Expert episodes in both modes on the fast engine (seconds)."""
    with Warehouse(db) as wh:
        for mode in (Mode.BPE, Mode.REACT):
            collect(CollectionConfig(mode=mode, split=split, limit=games, workers=0, engine="fast"), wh, run_id="test")


@pytest.fixture(scope="module")
def consolidated(tmp_path_factory: pytest.TempPathFactory, alfworld_data: Path) -> Path:
    db = tmp_path_factory.mktemp("consolidation") / "w.duckdb"
    make_episodes(db)
    result = consolidate(ConsolidationConfig(engine="fast", workers=0, batch_size=12), db, RuleConsolidator(), "t")
    assert result.planned == 2 * GAMES and result.failed == 0
    return db


def test_rule_quality_meets_acceptance(consolidated: Path) -> None:
    with Warehouse(consolidated) as wh:
        gate = quality_gate(wh, "expert", "rule", QualityThresholds())
        row = wh.con.execute("SELECT belief_precision, belief_recall, progress_validity, parse_validity, "
                             "episode_coverage FROM audit_quality WHERE consolidator = 'rule'").fetchone()
    assert gate.passed, gate.failures
    precision, recall, progress, parse, coverage = row
    assert precision >= 0.99 and recall >= 0.99 and progress >= 0.99 and parse == 1.0 and coverage == 1.0


def test_examples_are_rendered_turns(consolidated: Path) -> None:
    with Warehouse(consolidated) as wh:
        rows = wh.con.execute("SELECT kind, action, user_prompt, target, experience_json, belief_json FROM bpe_examples "
                              "ORDER BY episode_id, turn").fetchall()
        per_episode = wh.con.execute("SELECT sum(n_examples) FROM consolidated_episodes").fetchone()[0]
    assert len(rows) == per_episode > 0
    kinds = {r[0] for r in rows}
    assert kinds == {"env", "commit", "recall", "note", "track"}
    for kind, action, user, target, experience, belief in rows:
        parsed = parse_turn(target)
        assert parsed.kind.value == kind and parsed.action == action
        assert "Admissible commands:" in user and "Belief:" in user and "Progress:" in user
        json.loads(belief)
        if kind == "recall":
            assert json.loads(experience)["recalled"], "a rule recall must hit the bank"
        if kind == "env":
            admissible = user.split("Admissible commands:\n", 1)[1].split("\n", 1)[0].split(", ")
            assert action in admissible


def test_commits_are_true_in_engine_state(consolidated: Path) -> None:
    with Warehouse(consolidated) as wh:
        forms = dict(wh.con.execute("SELECT form, count(*) FROM progress_checks GROUP BY ALL").fetchall())
        false = wh.con.execute("SELECT count(*) FROM progress_checks WHERE NOT holds").fetchone()[0]
    assert {"take", "put"} <= set(forms) and false == 0


def test_bank_versions_and_edits(consolidated: Path) -> None:
    with Warehouse(consolidated) as wh:
        versions = wh.con.execute("SELECT version, parent_version, frozen, n_entries, json_array_length(source_episodes)"
                                  " FROM experience_banks ORDER BY version").fetchall()
        ops = dict(wh.con.execute("SELECT op, count(*) FROM experience_edits GROUP BY ALL").fetchall())
        caps = wh.con.execute("SELECT category, count(*) FROM experience_bank_entries WHERE version = "
                              "(SELECT max(version) FROM experience_banks) GROUP BY ALL").fetchall()
        used = wh.con.execute("SELECT sum(usage) FROM experience_bank_entries WHERE version = 1").fetchone()[0]
        bank_of_examples = {r[0] for r in wh.con.execute("SELECT DISTINCT bank_version FROM bpe_examples").fetchall()}
        churn = wh.con.execute("SELECT churn FROM audit_bank WHERE version = 1").fetchone()[0]
    assert versions[0][:3] == (0, None, True)
    assert len(versions) == 3 and versions[1][1] == 0 and versions[2][1] == 1
    assert versions[1][4] == 12 and versions[2][1] == 1
    assert ops.get("ADD", 0) > 0 and ops.get("SKIP", 0) > 0
    assert dict(caps)["search_priorities"] <= 40
    assert used > 0 and bank_of_examples == {0, 1} and churn > 0


def test_rerun_is_idempotent(consolidated: Path) -> None:
    result = consolidate(ConsolidationConfig(engine="fast", workers=0), consolidated, RuleConsolidator(), "t2")
    assert result.planned == 0 and result.bank_versions == []


def test_diverging_replay_fails_the_episode(consolidated: Path) -> None:
    with Warehouse(consolidated) as wh:
        victim = wh.con.execute("SELECT episode_id FROM episodes WHERE mode = 'react' ORDER BY episode_id LIMIT 1"
                                ).fetchone()[0]
        wh.con.execute("UPDATE steps SET observation = 'You arrive nowhere.' WHERE episode_id = ? AND t = 1", [victim])
    result = consolidate(ConsolidationConfig(engine="fast", workers=0, reconsolidate=True, evolve_bank=False, limit=24),
                         consolidated, RuleConsolidator(), "t3")
    with Warehouse(consolidated) as wh:
        status, reason = wh.con.execute("SELECT status, failure_reason FROM consolidated_episodes WHERE episode_id = ?"
                                        " AND consolidator = 'rule'", [victim]).fetchone()
        coverage = wh.con.execute("SELECT episode_coverage FROM audit_coverage WHERE consolidator='rule'").fetchone()[0]
    assert result.failed == 1 and status == "failed" and "diverged" in reason and coverage < 1


@pytest.mark.parametrize(
    ("subgoal", "holds", "form"),
    [("take a apple", True, "take"), ("take mug 1", False, "take"), ("heat apple 1", True, "heat"),
     ("cool apple 1", False, "cool"), ("put mug 2 in countertop", True, "put"), ("put mug 2 in fridge 1", False, "put"),
     ("light apple 1 with desklamp 1", True, "light"), ("find the thing", False, "unrecognized")],
)
def test_subgoal_forms(subgoal: str, holds: bool, form: str) -> None:
    facts = WorldFacts(located={"mug 2": frozenset({"countertop 1"})}, holding=frozenset({"apple 1"}),
                       flags={"apple 1": frozenset({"hot"}), "desklamp 1": frozenset({"on"})})
    check = check_subgoal(subgoal, facts)
    assert (check.holds, check.form) == (holds, form)


def test_collection_recalls_from_an_evolved_bank_version(consolidated: Path) -> None:
    """The loop closes: a frozen version that consolidation produced is what a later collection recalls from."""
    with Warehouse(consolidated) as wh:
        latest = wh.scalar("SELECT max(version) FROM experience_banks")
        induced = {r[0] for r in wh.con.execute("SELECT entry_id FROM experience_bank_entries WHERE version = ? "
                                                "AND entry_id LIKE 'sp-%'", [latest]).fetchall()}
        config = CollectionConfig(mode=Mode.BPE, split="valid_seen", limit=2, engine="fast", bank_version=latest)
        result = collect(config, wh, run_id="evolved")
        banks = wh.con.execute("SELECT DISTINCT bank FROM episodes WHERE run_id = 'evolved'").fetchall()
        seed_banks = wh.con.execute("SELECT DISTINCT bank FROM episodes WHERE mode = 'bpe' AND run_id = 'test'"
                                    ).fetchall()
        own = TeacherRegistry([EXPERT.model_copy(update={"bank_version": latest})])  # a teacher with its own bank
        collect(CollectionConfig(mode=Mode.BPE, split="valid_unseen", limit=1, engine="fast"), wh, run_id="own",
                registry=own)
        own_banks = wh.con.execute("SELECT DISTINCT bank FROM episodes WHERE run_id = 'own'").fetchall()
        stored = wh.scalar("SELECT bank_version FROM teachers WHERE name = 'expert'")
        with pytest.raises(KeyError, match="No frozen version 99"):
            collect(CollectionConfig(mode=Mode.BPE, split="valid_seen", limit=1, engine="fast", bank_version=99),
                    wh, run_id="missing")
    assert latest >= 1 and induced
    assert result.written == 2 and banks == [(f"alfworld-seed@v{latest}",)]
    assert seed_banks == [("alfworld-seed@v0",)]
    assert own_banks == [(f"alfworld-seed@v{latest}",)] and stored == latest


def test_progress_validity_gates_on_won_episodes_and_reports_all(warehouse) -> None:
    """A teacher's false claims in a game it lost are its play, not the consolidator's error: the gate's
    progress_validity counts the won episodes (those a success-filtered dataset can hold), progress_validity_all
    every episode."""
    con = warehouse.con
    for episode, won in (("won-1", True), ("lost-1", False)):
        con.execute("INSERT INTO consolidated_episodes (episode_id, consolidator, consolidation_run_id, teacher, "
                    "source_mode, game_id, split, task_type, won, status, attempts, n_source_turns, n_env_steps, "
                    "n_examples, n_meta, bank_id, bank_version, engine, created_at, code_version) VALUES "
                    "(?, 'rule', 'r', 't', 'bpe', ?, 'train', 'pick', ?, 'ok', 1, 4, 4, 4, 1, 'b', 1, 'fast', "
                    "now(), 'c')", [episode, episode, won])
    checks = [("won-1", 1, True), ("won-1", 2, True), ("lost-1", 1, False), ("lost-1", 2, True)]
    con.executemany("INSERT INTO progress_checks VALUES (?, 'rule', ?, 'put apple 1 in table', 'put', ?, '')", checks)
    validity = con.execute("SELECT progress_validity, progress_validity_all FROM audit_progress WHERE teacher = 't'"
                           ).fetchone()
    gate = quality_gate(warehouse, "t", "rule", QualityThresholds())
    assert validity == (1.0, 0.75)
    assert gate.metrics["progress_validity"] == 1.0 and not any("progress" in f for f in gate.failures)
