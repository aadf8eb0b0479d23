"""Collection with frontier-style teachers served over loopback HTTP: both SDKs, tokens and cost per step,
episode and teacher, the registry's concurrency bound, and a 20% fault rate run."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from evoharness.collection import CollectionConfig, CollectionResult, collect
from evoharness.testing.alfworld_player import WalkthroughPlayer
from evoharness.testing.loopback import Call, LoopbackServer, Reply, Responder
from evoharness.testing.responders import ConcurrencyProbe, FaultInjector
from evoharness.testing.teachers import TEST_KEY_ENV, loopback_teacher, write_registry
from warehouse import Warehouse

REPO = Path(__file__).resolve().parents[1]
os.environ.setdefault("ALFWORLD_DATA", str(REPO.parent / "shared" / "alfworld"))
ENGINE = os.environ.get("EVOHARNESS_TEST_ENGINE", "fast")
SPLIT = "valid_seen"


@pytest.fixture(scope="module")
def player() -> WalkthroughPlayer:
    return WalkthroughPlayer.for_split(SPLIT, 12)


@pytest.fixture(autouse=True)
def api_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(TEST_KEY_ENV, "sk-collection-test-0123456789")


def run(teachers_file: Path, db: Path, teacher: str, limit: int, **overrides: object) -> CollectionResult:
    config = CollectionConfig(teacher=teacher, split=SPLIT, limit=limit, max_steps=30, engine=ENGINE,
                              teachers_file=str(teachers_file), **overrides)  # type: ignore[arg-type]
    with Warehouse(db) as warehouse:
        return collect(config, warehouse, run_id=f"test-{teacher}")


def test_both_sdks_store_tokens_and_cost(tmp_path: Path, player: WalkthroughPlayer) -> None:
    db, registry = tmp_path / "wh.duckdb", tmp_path / "teachers.yaml"
    with LoopbackServer(player) as server:
        specs = [loopback_teacher("lb-claude", "anthropic", server, price_in=3.0, price_out=15.0),
                 loopback_teacher("lb-gpt", "openai", server, price_in=1.25, price_out=10.0),
                 loopback_teacher("lb-vllm", "openai_compatible", server, api_key_env=None, price_in=0.0,
                                  price_out=0.0)]
        write_registry(registry, *specs)
        results = {spec.name: run(registry, db, spec.name, limit=4) for spec in specs}
        apis = {call.api for call in server.calls}
    assert apis == {"openai", "anthropic"}
    assert all(r.written == 4 and r.failed == 0 for r in results.values())
    assert all(r.won >= 3 for r in results.values())  # the walkthrough player wins nearly every game
    with Warehouse(db) as wh:
        missing = wh.con.execute(
            "SELECT count(*) FROM steps s JOIN episodes e USING (episode_id) WHERE e.teacher LIKE 'lb-%' AND "
            "(s.input_tokens IS NULL OR s.output_tokens IS NULL OR s.cost_usd IS NULL)").fetchone()[0]
        mismatched = wh.con.execute(
            "SELECT count(*) FROM (SELECT e.episode_id, any_value(e.cost_usd) AS ec, sum(s.cost_usd) AS sc, "
            "any_value(e.input_tokens) AS ei, sum(s.input_tokens) AS si FROM episodes e JOIN steps s USING (episode_id) "
            "GROUP BY e.episode_id) WHERE abs(ec - sc) > 1e-12 OR ei <> si").fetchone()[0]
        priced = wh.con.execute(
            "SELECT count(*) FROM steps s JOIN episodes e USING (episode_id) WHERE e.teacher = 'lb-gpt' AND "
            "abs(s.cost_usd - (s.input_tokens * 1.25 + s.output_tokens * 10.0) / 1e6) > 1e-12").fetchone()[0]
        columns, rows = wh.query("teacher_costs")
        teachers = dict(wh.con.execute("SELECT name, provider FROM teachers").fetchall())
    assert missing == 0 and mismatched == 0 and priced == 0
    view = {row[0]: dict(zip(columns, row)) for row in rows}
    assert set(view) == {"lb-claude", "lb-gpt", "lb-vllm"}
    for name, row in view.items():
        assert row["episodes"] == 4 and row["provider"] == teachers[name]
        assert row["input_tokens"] > 0 and row["output_tokens"] > 0 and row["mean_harness_calls"] >= 1
        assert row["cost_per_success"] == pytest.approx(row["cost_usd"] / row["won"], abs=1e-6)
    assert view["lb-vllm"]["cost_usd"] == 0.0
    assert view["lb-claude"]["cost_usd"] > view["lb-gpt"]["cost_usd"] > 0  # same tokens, dearer prices


def test_concurrency_comes_from_the_registry(tmp_path: Path, player: WalkthroughPlayer) -> None:
    probe = ConcurrencyProbe(player, hold_s=0.05)
    with LoopbackServer(probe) as server:
        write_registry(tmp_path / "t.yaml", loopback_teacher("lb", "openai", server, max_concurrency=3))
        bounded = run(tmp_path / "t.yaml", tmp_path / "wh.duckdb", "lb", limit=6)
        assert bounded.concurrency == 3
        assert 2 <= probe.max_in_flight <= 3
        capped = run(tmp_path / "t.yaml", tmp_path / "wh2.duckdb", "lb", limit=2, concurrency=32)
        assert capped.concurrency == 3  # the registry's bound caps a larger request


def context_too_long_for(objective: str, inner: Responder) -> Responder:
    """``inner``, except that every call about ``objective`` is answered 'context too long'."""
    def respond(call: Call) -> Reply:
        if f"Task: {objective}" in call.prompt:
            return Reply(status=400, text="prompt is too long: 300000 tokens > 200000 maximum",
                         error_code="context_length_exceeded")
        return inner(call)
    return respond


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
def test_twenty_percent_faults_every_episode_finished_or_failed_with_reason(
    tmp_path: Path, player: WalkthroughPlayer, provider: str
) -> None:
    doomed = next(iter(player.plans))  # one objective whose calls all fail permanently
    faults = FaultInjector(context_too_long_for(doomed, player), rate=0.2, seed=7, timeout_s=1.5)
    db = tmp_path / "wh.duckdb"
    with LoopbackServer(faults) as server:
        write_registry(tmp_path / "t.yaml", loopback_teacher("lb", provider, server, max_concurrency=12))
        result = run(tmp_path / "t.yaml", db, "lb", limit=12)
    assert result.planned == result.written == 12
    injected = {kind for kind, n in faults.injected.items() if n and kind != "none"}
    assert len(injected) >= 5, faults.injected
    with Warehouse(db) as wh:
        rows = wh.con.execute("SELECT status, failure_reason, won, n_invalid FROM episodes").fetchall()
        _, problems = wh.query("check_episode_integrity", teacher="lb")
    assert problems == []
    assert all(status in ("finished", "failed") for status, *_ in rows)
    failed = [(reason, won) for status, reason, won, _ in rows if status == "failed"]
    assert failed and all(reason and reason.startswith("PolicyError: ") and not won for reason, won in failed)
    assert any("context too long" in reason for reason, _ in failed)
    won = sum(won for _, _, won, _ in rows)
    assert won >= 0.6 * (len(rows) - len(failed))
    assert sum(n_invalid for *_, n_invalid in rows) > 0  # garbage/empty/refusal answers became invalid turns
