"""API keys stay in their env vars: never in the warehouse file, logs, Dagster events or exception texts,
even when a server echoes the key back in an error (as OpenAI's 401 does)."""

from __future__ import annotations

import asyncio
import logging
import os
import traceback
from pathlib import Path

import dagster as dg
import pytest

from assets.episodes import teacher_episodes
from evoharness.collection import CollectionConfig, collect
from evoharness.harness.prompts import Mode
from evoharness.teachers.base import PolicyError
from evoharness.teachers.factory import build_policy
from evoharness.teachers.llm import LLMTeacher
from evoharness.teachers.registry import TeacherRegistry
from evoharness.testing.alfworld_player import WalkthroughPlayer
from evoharness.testing.loopback import Call, LoopbackServer, Reply
from evoharness.testing.responders import FaultInjector
from evoharness.testing.teachers import TEST_KEY_ENV, loopback_teacher, write_registry
from pipelines.partitions import TEACHER_PARTITIONS_NAME
from pipelines.resources import AlfworldResource, WarehouseResource
from warehouse import Warehouse

REPO = Path(__file__).resolve().parents[1]
os.environ.setdefault("ALFWORLD_DATA", str(REPO.parent / "shared" / "alfworld"))
ENGINE = os.environ.get("EVOHARNESS_TEST_ENGINE", "fast")
CANARY = "sk-canary-EVOHARNESS-7f3a9c2e5b1d4e6f"
FRAGMENT = "7f3a9c2e5b1d4e6f"  # the distinctive part, in case a prefix gets rewritten


def echo_key_for(objective: str, inner: FaultInjector):
    """Faults, plus a 401 that echoes the request's key for one objective."""
    def respond(call: Call) -> Reply:
        if f"Task: {objective}" in call.prompt:
            sent = call.headers.get("x-api-key") or call.headers.get("authorization", "")
            return Reply(status=401, text=f"Incorrect API key provided: {sent.removeprefix('Bearer ')}")
        return inner(call)
    return respond


async def direct_call(policy: LLMTeacher, objective: str) -> None:
    messages = [{"role": "system", "content": "s"}, {"role": "user", "content": f"Task: {objective}"}]
    try:
        await policy.call(messages, "direct")
    finally:
        await policy.aclose()


def test_key_never_leaks(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture,
                         capfd: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv(TEST_KEY_ENV, CANARY)
    caplog.set_level(logging.DEBUG)
    player = WalkthroughPlayer.for_split("valid_seen", 4)
    doomed = next(iter(player.plans))
    responder = echo_key_for(doomed, FaultInjector(player, rate=0.3, seed=3, timeout_s=1.5))
    db, registry = tmp_path / "wh.duckdb", tmp_path / "teachers.yaml"
    exception_texts: list[str] = []
    with LoopbackServer(responder) as server:
        specs = [loopback_teacher("lb-claude", "anthropic", server), loopback_teacher("lb-gpt", "openai", server)]
        write_registry(registry, *specs)
        for spec in specs:
            config = CollectionConfig(teacher=spec.name, split="valid_seen", limit=4, max_steps=20, engine=ENGINE,
                                      teachers_file=str(registry))
            with Warehouse(db) as wh:
                collect(config, wh, run_id="secrets")
        # the same 401 raised directly: the whole exception text, chain included
        for spec in specs:
            policy = build_policy(spec.name, Mode.BPE, TeacherRegistry.load(registry))
            assert isinstance(policy, LLMTeacher)
            with pytest.raises(PolicyError) as info:
                asyncio.run(direct_call(policy, doomed))
            exception_texts.append("".join(traceback.format_exception(info.value)))
            assert "HTTP 401" in exception_texts[-1] and "[REDACTED]" in exception_texts[-1]
        # the key did travel, from the env var, in the request headers
        assert all(CANARY in c.headers.get("x-api-key", "") + c.headers.get("authorization", "") for c in server.calls)

        # Dagster: materialize teacher_episodes for one teacher and read every event of the run
        monkeypatch.setenv("EVOHARNESS_TEACHERS", str(registry))
        with dg.instance_for_test() as instance:
            instance.add_dynamic_partitions(TEACHER_PARTITIONS_NAME, ["lb-gpt"])
            result = dg.materialize(
                [teacher_episodes], partition_key="lb-gpt", instance=instance,
                resources={"warehouse": WarehouseResource(path=str(tmp_path / "dagster.duckdb")),
                           "alfworld": AlfworldResource()},
                run_config={"ops": {"teacher_episodes": {"config": {"limit": 3, "max_steps": 20, "engine": ENGINE}}}},
            )
            assert result.success
            dagster_text = "\n".join(repr(event) for event in instance.all_logs(result.run_id))
    assert "episodes_written" in dagster_text

    with Warehouse(db) as wh:
        reasons = [r[0] for r in wh.con.execute("SELECT failure_reason FROM episodes WHERE status = 'failed'").fetchall()]
        assert any("HTTP 401" in r for r in reasons)  # the echoing server was hit and its answer stored
    out, err = capfd.readouterr()
    stored = b"".join(p.read_bytes() for p in tmp_path.glob("*.duckdb*"))
    texts = {"warehouse files": stored.decode("latin-1"), "logs": caplog.text, "stdout": out, "stderr": err,
             "failure reasons": "\n".join(reasons), "exceptions": "\n".join(exception_texts),
             "dagster events": dagster_text, "registry": registry.read_text()}
    assert caplog.text and stored
    leaks = [where for where, text in texts.items() if FRAGMENT in text]
    assert leaks == []
