"""The LLM consolidator through the loopback HTTP server: good, partially wrong and malformed answers."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from evoharness.consolidation.audit import quality_gate
from evoharness.consolidation.config import ConsolidationConfig, LLMSettings, QualityThresholds
from evoharness.consolidation.llm import build_llm_consolidator
from evoharness.consolidation.pipeline import consolidate
from evoharness.teachers.registry import TeacherRegistry
from evoharness.testing.loopback import Call, LoopbackServer, Reply
from evoharness.testing.teachers import loopback_teacher
from tests.test_consolidation import make_episodes
from warehouse import Warehouse

_TARGET_RE = re.compile(r"Task: (?:put|look at|examine|heat|cool|clean|find) (?:a |an |some |two |the )?"
                        r"(?:hot |cool |clean )?([a-z]+)")


EDITOR_TOKENS = (700, 60)  # per bank-editor call
GOOD_EDITS = {"edits": [
    {"op": "ADD", "category": "common_mistakes", "entry_id": None, "text": "Open the fridge before searching it.",
     "reason": "lesson: open the fridge early"},
    {"op": "UPDATE", "category": "general_skills", "entry_id": "g4",
     "text": "Never revisit a searched receptacle unless something changed.", "reason": "sharper wording"},
    {"op": "REMOVE", "category": "common_mistakes", "entry_id": "m2", "text": None, "reason": "covered by g3"},
    {"op": "SKIP", "category": "notes", "entry_id": None, "text": None, "reason": "found-at notes add nothing"},
]}


def scripted(call: Call) -> Reply:
    """Good for most task types; partially wrong for pick-and-place; malformed for two-object tasks.
    The bank editor's first answer names an entry the bank lacks (rejected), its second one is good."""
    prompt = call.prompt
    if "Lessons noted in this batch" in prompt:
        if "was rejected" not in prompt:
            bad = {"edits": [{"op": "UPDATE", "category": "notes", "entry_id": "zz9", "text": "x", "reason": "r"}]}
            return Reply(text=json.dumps(bad), input_tokens=EDITOR_TOKENS[0], output_tokens=EDITOR_TOKENS[1])
        return Reply(text=json.dumps(GOOD_EDITS), input_tokens=EDITOR_TOKENS[0], output_tokens=EDITOR_TOKENS[1])
    target = _TARGET_RE.search(prompt).group(1)  # type: ignore[union-attr]
    if "Task type: pick_two_obj_and_place" in prompt:
        return Reply(text='{"insertions": [{"before_step": 0, "kind": "recall"', input_tokens=900, output_tokens=20)
    good = [{"before_step": 0, "kind": "recall", "argument": f"where {target}", "think": "I recall first."},
            {"before_step": 0, "kind": "commit", "argument": f"take a {target}", "think": "First subgoal."}]
    taken = re.search(rf"\[(\d+)\] > take ({target} \d+) from", prompt)
    n_steps = len(re.findall(r"^\[\d+\] > ", prompt, re.MULTILINE))
    if taken and int(taken.group(1)) + 1 < n_steps:  # after the pick-up: close "take a <target>" (true)
        good.append({"before_step": int(taken.group(1)) + 1, "kind": "commit",
                     "argument": f"put {taken.group(2)} in place", "think": "Got it."})
    if "Task type: pick_and_place_simple" in prompt:
        wrong = [{"before_step": 1, "kind": "commit", "argument": f"put {target} 1 in fridge", "think": "Done."},
                 {"before_step": 1, "kind": "note", "argument": "line one\nline two", "think": "A note."}]
        return Reply(text=json.dumps({"insertions": good + wrong, "lessons": ["Open the fridge early."]}),
                     input_tokens=1000, output_tokens=120)
    return Reply(text="```json\n" + json.dumps({"insertions": good, "lessons": []}) + "\n```",
                 input_tokens=1000, output_tokens=80)


@pytest.fixture(scope="module")
def llm_db(tmp_path_factory: pytest.TempPathFactory, alfworld_data: Path) -> tuple[Path, int]:
    db = tmp_path_factory.mktemp("llm") / "w.duckdb"
    make_episodes(db, games=6)
    with LoopbackServer(scripted) as server:
        registry = TeacherRegistry([loopback_teacher("consolidator", "openai_compatible", server, api_key_env=None,
                                                     model="loopback-model",
                                                     price_in=2.0, price_out=8.0)])
        settings = LLMSettings(teacher="consolidator", max_attempts=3)
        result = consolidate(ConsolidationConfig(engine="fast", workers=0, consolidator="llm", llm=settings,
                                                 modes=("bpe",)),
                             db, build_llm_consolidator(settings, registry), "llm-test")
    return db, result.failed


def test_malformed_answers_are_retried_then_failed(llm_db: tuple[Path, int]) -> None:
    db, failed = llm_db
    with Warehouse(db) as wh:
        rows = wh.con.execute("SELECT task_type, status, attempts, failure_reason, input_tokens FROM "
                              "consolidated_episodes WHERE consolidator = 'llm'").fetchall()
    bad = [r for r in rows if r[0] == "pick_two_obj_and_place"]
    assert failed == len(bad) == 1
    assert bad[0][1] == "failed" and bad[0][2] == 3 and "invalid output after 3 attempts" in bad[0][3] and bad[0][4] == 2700
    assert all(r[1] == "ok" and r[2] == 1 for r in rows if r[0] != "pick_two_obj_and_place")


def test_llm_quality_shows_in_the_views_and_fails_the_gate(llm_db: tuple[Path, int]) -> None:
    db, _ = llm_db
    with Warehouse(db) as wh:
        columns, rows = wh.query("audit_quality_for", teacher="expert", consolidator="llm")
        q = dict(zip(columns, rows[0]))
        unrecognized = wh.con.execute("SELECT count(*) FROM progress_checks WHERE consolidator='llm' AND NOT holds"
                                      ).fetchone()[0]
        cost = wh.con.execute("SELECT input_tokens, output_tokens, cost_usd FROM audit_cost WHERE consolidator='llm'"
                              ).fetchone()
        run = wh.con.execute("SELECT model, prompt_id, prompt_sha, n_failed FROM consolidation_runs").fetchone()
        gate = quality_gate(wh, "expert", "llm", QualityThresholds())
    assert q["episode_coverage"] == pytest.approx(5 / 6, abs=1e-3)
    assert q["progress_validity"] < 0.99 and unrecognized >= 1
    assert q["parse_validity"] < 1.0
    assert q["belief_precision"] >= 0.99  # Belief is the deterministic parser's, whoever annotates
    assert not gate.passed and any("parse_validity" in f for f in gate.failures)
    assert cost[0] == 5 * 1000 + 3 * 900 + 2 * EDITOR_TOKENS[0]  # annotation calls + two bank-editor calls
    assert cost[2] == pytest.approx((cost[0] * 2 + cost[1] * 8) / 1e6)
    assert run[0] == "loopback-model" and run[1] == "consolidation/annotate" and len(run[2]) == 64 and run[3] == 1


def test_llm_bank_editor_edits_are_validated_applied_and_logged(llm_db: tuple[Path, int]) -> None:
    db, _ = llm_db
    with Warehouse(db) as wh:
        edits = wh.con.execute("SELECT op, entry_id, text, reason FROM experience_edits WHERE consolidator = 'llm' "
                               "AND op <> 'SKIP' AND entry_id NOT LIKE 'sp-%' AND entry_id NOT LIKE 'ts-%' "
                               "AND entry_id NOT LIKE 'gs-%' AND entry_id NOT LIKE 'mk-%' ORDER BY edit_index").fetchall()
        version = wh.scalar("SELECT max(version) FROM experience_banks WHERE consolidation_run_id LIKE '%:llm:%'")
        entries = dict(wh.con.execute("SELECT entry_id, text FROM experience_bank_entries WHERE version = ?",
                                      [version]).fetchall())
    assert [(op, entry_id) for op, entry_id, _, _ in edits][1:] == [("UPDATE", "g4"), ("REMOVE", "m2")]
    added = edits[0]
    assert added[0] == "ADD" and added[1].startswith("llm-") and added[3] == "lesson: open the fridge early"
    assert entries[added[1]] == "Open the fridge before searching it."
    assert entries["g4"].startswith("Never revisit") and "m2" not in entries


def test_editor_answers_are_checked_against_the_bank() -> None:
    from evoharness.consolidation.bank_editor import EditorAnswerError, parse_edits
    from evoharness.envs.alfworld import SEED_BANK
    from evoharness.harness.experience import ExperienceBank

    bank = ExperienceBank.from_file(SEED_BANK).data
    fenced = "```json\n" + json.dumps(GOOD_EDITS) + "\n```"
    assert [e.op for e in parse_edits(fenced, bank)] == ["ADD", "UPDATE", "REMOVE", "SKIP"]
    with pytest.raises(EditorAnswerError, match="not in the bank"):
        parse_edits(json.dumps({"edits": [{"op": "REMOVE", "category": "notes", "entry_id": "nope", "reason": "r"}]}),
                    bank)
    with pytest.raises(EditorAnswerError, match="needs a text"):
        parse_edits(json.dumps({"edits": [{"op": "ADD", "category": "notes", "reason": "r"}]}), bank)
    with pytest.raises(EditorAnswerError, match="required shape"):
        parse_edits('{"edits": [{"op": "MERGE"}]}', bank)
