"""Automation that cannot run away, and every bad input a clear error (issue 12), through the real CLI as a
subprocess against a real loopback HTTP server: preflight, circuit breaker, spend caps, dry-run estimates,
clear one-line errors with non-zero exit codes, the opt-in sensor, and Dagster run config."""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import dagster as dg
import pytest

from evoharness.testing.alfworld_player import WalkthroughPlayer
from evoharness.testing.loopback import Call, LoopbackServer, Reply
from evoharness.testing.teachers import TEST_KEY_ENV, loopback_teacher, write_registry
from warehouse import Warehouse

REPO = Path(__file__).resolve().parents[1]
KEY = "sk-safety-test-0123456789"
SPLIT = "valid_seen"


def cli(*args: str, env: dict[str, str], timeout: float = 180) -> subprocess.CompletedProcess[str]:
    """``python -m evoharness_cli ARGS`` with the worktree's code first on the path."""
    return subprocess.run([sys.executable, "-m", "evoharness_cli", *args], env=env, capture_output=True, text=True,
                          timeout=timeout, check=False)


@pytest.fixture
def env(tmp_path: Path, alfworld_data: Path) -> dict[str, str]:
    path = os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    return os.environ | {"PYTHONPATH": path, "ALFWORLD_DATA": str(alfworld_data), "OMP_NUM_THREADS": "1",
                         "EVOHARNESS_DB": str(tmp_path / "wh.duckdb"), "EVOHARNESS_TEACHERS": str(tmp_path / "t.yaml"),
                         TEST_KEY_ENV: KEY, "COLUMNS": "200"}


@pytest.fixture(scope="module")
def player() -> WalkthroughPlayer:
    return WalkthroughPlayer.for_split(SPLIT, 12)


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def count(db: str, sql: str) -> float:
    with Warehouse(db) as wh:
        return float(wh.scalar(sql) or 0)


def no_traceback(result: subprocess.CompletedProcess[str]) -> None:
    assert "Traceback" not in result.stdout + result.stderr, result.stderr


# -- teachers that cannot answer --------------------------------------------------------------------------------


def test_unreachable_url_stops_at_preflight_and_at_the_circuit_breaker(env: dict[str, str]) -> None:
    with LoopbackServer(lambda call: Reply(text="unused")) as server:
        dead = loopback_teacher("dead", "openai", server, max_concurrency=2)
    dead = dead.model_copy(update={"base_url": f"http://127.0.0.1:{closed_port()}/v1"})
    write_registry(env["EVOHARNESS_TEACHERS"], dead)
    args = ("collect", "--teacher", "dead", "--split", SPLIT, "--limit", "20", "--max-steps", "20")

    started = time.monotonic()
    stopped = cli(*args, env=env)
    assert time.monotonic() - started < 30
    assert stopped.returncode == 1
    assert "preflight of teacher 'dead' failed: cannot reach http://127.0.0.1" in stopped.stderr
    assert "base_url" in stopped.stderr  # the fix
    no_traceback(stopped)
    assert count(env["EVOHARNESS_DB"], "SELECT count(*) FROM episode_attempts") == 0

    started = time.monotonic()  # without the preflight, the circuit breaker stops it after 3 failed calls
    broken = cli(*args, "--no-preflight", "--max-consecutive-failures", "3", env=env)
    assert time.monotonic() - started < 30
    assert broken.returncode == 1
    assert "circuit breaker: 3 calls in a row failed (connection)" in broken.stdout
    assert "stopped by its circuit breaker" in broken.stderr
    no_traceback(broken)
    attempted = count(env["EVOHARNESS_DB"], "SELECT count(*) FROM episode_attempts")
    assert 3 <= attempted <= 3 + 2  # the streak, plus what was in flight (max_concurrency 2)


def test_wrong_key_stops_at_preflight(env: dict[str, str], player: WalkthroughPlayer) -> None:
    def respond(call: Call) -> Reply:
        if call.headers.get("x-api-key") != "sk-the-right-key-000":
            return Reply(status=401, text="invalid x-api-key")
        return player(call)

    with LoopbackServer(respond) as server:
        write_registry(env["EVOHARNESS_TEACHERS"], loopback_teacher("lb", "anthropic", server))
        result = cli("collect", "--teacher", "lb", "--split", SPLIT, "--limit", "6", env=env)
        calls = len(server.calls)
    assert result.returncode == 1
    assert f"rejected the key from ${TEST_KEY_ENV}" in result.stderr and "HTTP 401" in result.stderr
    assert KEY not in result.stdout + result.stderr
    no_traceback(result)
    assert calls == 1  # one preflight call, no retries of a rejected key, no episodes
    assert count(env["EVOHARNESS_DB"], "SELECT count(*) FROM episode_attempts") == 0


# -- spend caps and the dry run ---------------------------------------------------------------------------------


def test_spend_cap_stops_the_run_and_the_registry_cap_holds_across_runs(env: dict[str, str],
                                                                       player: WalkthroughPlayer) -> None:
    db, cap, concurrency = env["EVOHARNESS_DB"], 0.05, 2
    args = ("collect", "--teacher", "lb", "--split", SPLIT, "--limit", "12", "--max-steps", "30",
            "--concurrency", str(concurrency))
    with LoopbackServer(player) as server:
        spec = loopback_teacher("lb", "anthropic", server, price_in=3.0, price_out=15.0, max_concurrency=concurrency)
        write_registry(env["EVOHARNESS_TEACHERS"], spec)
        run = cli(*args, "--max-spend-usd", str(cap), env=env)
        assert run.returncode == 3, run.stderr
        assert "spend cap reached: this run's --max-spend-usd is $0.05" in run.stdout
        assert "raise --max-spend-usd" in run.stderr
        no_traceback(run)
        spent = count(db, "SELECT sum(cost_usd) FROM episode_attempts")
        dearest = count(db, "SELECT max(cost_usd) FROM episode_attempts")
        episodes = count(db, "SELECT count(*) FROM episode_attempts")
        assert episodes < 12
        assert cap - dearest <= spent <= cap + concurrency * dearest

        # the registry cap counts the whole ledger: a new run without a run cap starts no episode
        write_registry(env["EVOHARNESS_TEACHERS"], spec.model_copy(update={"max_spend_usd": spent}))
        again = cli(*args, env=env)
        assert again.returncode == 3
        assert "spend cap reached: teacher 'lb' max_spend_usd" in again.stdout
        assert count(db, "SELECT count(*) FROM episode_attempts") == episodes


def test_dry_run_estimate_is_within_a_quarter_of_the_actual_spend(env: dict[str, str],
                                                                  player: WalkthroughPlayer) -> None:
    db = env["EVOHARNESS_DB"]
    base = ("--split", SPLIT, "--max-steps", "30")
    with LoopbackServer(player) as server:
        write_registry(env["EVOHARNESS_TEACHERS"], loopback_teacher("lb", "openai", server, price_in=3.0,
                                                                    price_out=15.0))
        assert cli("collect", "--teacher", "expert", "--limit", "12", *base, env=env).returncode == 0
        assert cli("collect", "--teacher", "lb", "--limit", "3", *base, env=env).returncode == 0  # a pilot
        calls = len(server.calls)
        dry = cli("--format", "json", "collect", "--teacher", "lb", "--limit", "12", *base, "--dry-run", env=env)
        assert dry.returncode == 0, dry.stderr
        assert len(server.calls) == calls  # a dry run calls nothing
        rows = dict(json.loads(dry.stdout)["rows"])
        estimate = float(re.match(r"\$([0-9.]+)", rows["estimated cost"]).group(1))  # type: ignore[union-attr]
        assert rows["episodes to run"].startswith("9 ")
        before = count(db, "SELECT sum(cost_usd) FROM episode_attempts WHERE teacher = 'lb'")
        run = cli("collect", "--teacher", "lb", "--limit", "12", *base, env=env)
        assert run.returncode == 0
        assert re.search(r"lb/bpe on valid_seen: 9/9 episodes \(100%\) [0-9.]+ episodes/(s|min)", run.stdout)
        actual = count(db, "SELECT sum(cost_usd) FROM episode_attempts WHERE teacher = 'lb'") - before
    assert actual > 0
    assert abs(estimate - actual) <= 0.25 * actual, (estimate, actual)


# -- bad input: one clear line, a non-zero exit, no traceback ----------------------------------------------------


def test_consolidate_names_what_is_missing(env: dict[str, str]) -> None:
    unknown = cli("consolidate", "--teacher", "nobody", env=env)
    assert unknown.returncode == 1
    assert "--teacher 'nobody' has no finished episodes" in unknown.stderr
    assert cli("collect", "--limit", "2", "--split", SPLIT, env=env).returncode == 0  # the README's main job
    after = cli("consolidate", "--teacher", "expert", env=env)
    assert after.returncode == 1
    assert "consolidate reads --split train unless told; it has valid_seen: 2" in after.stderr
    for result in (unknown, after):
        no_traceback(result)


def test_bad_input_is_one_clear_line(env: dict[str, str], tmp_path: Path) -> None:
    """Each case: (args, extra env, exit code, texts on stderr); all run at once, each its own process."""
    not_duckdb = tmp_path / "notes.txt"
    not_duckdb.write_text("not a database\n" * 500)
    broken = tmp_path / "broken.yaml"
    broken.write_text("version: 1\nteachers:\n- name: x\n  provider: nope\n")
    range_error = ["greater than or equal to 1"]
    cases: list[tuple[tuple[str, ...], dict[str, str], int, list[str]]] = [
        (("collect", "--concurrency", "0"), {}, 2, ["Invalid value for '--concurrency'", *range_error]),
        (("collect", "--concurrency", "-2"), {}, 2, ["Invalid value for '--concurrency'", *range_error]),
        (("collect", "--limit", "-3"), {}, 2, ["Invalid value for '--limit'", *range_error]),
        (("games", "--limit", "-1"), {}, 2, ["Invalid value for '--limit'", *range_error]),
        (("summary", "--db", str(tmp_path)), {}, 1, [f"error: warehouse {tmp_path} is a directory", "--db"]),
        (("summary", "--db", str(not_duckdb)), {}, 1,
         [f"error: warehouse {not_duckdb} is not a DuckDB database file", "--db"]),
        (("summary", "--db", str(not_duckdb / "sub" / "wh.duckdb")), {}, 1,
         [f"error: cannot create the folder of warehouse {not_duckdb / 'sub' / 'wh.duckdb'} (Not a directory)",
          "--db"]),
        (("teacher", "list"), {"EVOHARNESS_TEACHERS": str(broken)}, 1,
         [f"error: teacher registry {broken} is unusable (teachers.0.provider:"]),
    ]
    with ThreadPoolExecutor(max_workers=4) as pool:
        results = list(pool.map(lambda case: cli(*case[0], env=env | case[1], timeout=60), cases))
    for (args, _, code, says), result in zip(cases, results, strict=True):
        assert result.returncode == code, (args, result.stderr)
        assert all(text in result.stderr for text in says), (args, result.stderr)
        if code == 1:
            assert len(result.stderr.strip().splitlines()) == 1, (args, result.stderr)
        no_traceback(result)


def test_progress_lines_when_not_a_terminal(capsys: pytest.CaptureFixture[str]) -> None:
    from evoharness_cli.cli_common import progress_reporter

    with progress_reporter("GRPO steps", unit="steps", every_s=0.0) as update:
        update(1, 4, "reward 0.500")
        update(4, 4, "reward 0.750")
    lines = capsys.readouterr().out.splitlines()
    assert re.fullmatch(r"GRPO steps: 1/4 steps \(25%\) [0-9.]+ steps/(s|min) ETA \S+ elapsed \S+ \| reward 0.500",
                        lines[0]), lines
    assert lines[1].startswith("GRPO steps: 4/4 steps (100%)") and "ETA" not in lines[1]


def test_empty_traj_data_names_the_file(env: dict[str, str], alfworld_data: Path, tmp_path: Path) -> None:
    from evoharness.envs.alfworld.catalog import GameCatalog

    game = GameCatalog(alfworld_data).games(SPLIT, 1)[0]
    copy = tmp_path / "data" / game.game_path.parent.relative_to(alfworld_data)
    copy.mkdir(parents=True)
    shutil.copy(game.game_path, copy / game.game_path.name)
    (copy / "traj_data.json").write_text("")
    result = cli("collect", "--split", SPLIT, "--limit", "1", env=env | {"ALFWORLD_DATA": str(tmp_path / "data")})
    assert result.returncode == 1
    assert "failed 1: EnvWorkerError: AlfworldDataError" in result.stdout
    assert f"{copy / 'traj_data.json'} is corrupt (empty)" in result.stdout
    assert "nothing succeeded" in result.stderr
    no_traceback(result)


def test_output_for_people_and_machines(env: dict[str, str]) -> None:
    """Help shows every default (no stray " ."), tables are full width when piped, csv/json for machines."""
    commands = [("collect", "--help"), ("--format", "csv", "teacher", "list"), ("teacher", "list")]
    with ThreadPoolExecutor(max_workers=3) as pool:
        helped, listed, wide = pool.map(lambda args: cli(*args, env=env | {"COLUMNS": "80"}, timeout=60), commands)
    assert helped.returncode == listed.returncode == wide.returncode == 0
    flat = " ".join(helped.stdout.replace("│", " ").split())
    assert "[default: 0 for the fast engine, 2 for textworld]" in flat and "[default: the seed bank]" in flat
    assert not re.search(r"\S \.(\s|$)", flat)
    assert listed.stdout.splitlines()[0].startswith("name,provider,model,base_url,api_key_env,price_in")
    assert "max_spend_usd" in wide.stdout and "auto_distill" in wide.stdout  # headers, never cut to 80 columns
    assert max(len(line) for line in wide.stdout.splitlines()) > 80


# -- Dagster: the sensor is opt-in, run config fails early with one line --------------------------------------------


def test_sensor_starts_only_marked_teachers_that_pass_preflight(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                               player: WalkthroughPlayer) -> None:
    from pipelines.definitions import defs
    from pipelines.resources import WarehouseResource
    from pipelines.sensors import new_teacher_sensor

    registry = tmp_path / "t.yaml"
    monkeypatch.setenv("EVOHARNESS_TEACHERS", str(registry))
    monkeypatch.setenv(TEST_KEY_ENV, KEY)
    resources = {"warehouse": WarehouseResource(path=str(tmp_path / "wh.duckdb"))}
    with LoopbackServer(player) as server, dg.instance_for_test() as instance:
        quiet = loopback_teacher("quiet", "openai", server)
        dead = loopback_teacher("dead", "openai", server).model_copy(
            update={"auto_distill": True, "base_url": f"http://127.0.0.1:{closed_port()}/v1"})
        write_registry(registry, quiet, dead)
        first = new_teacher_sensor(dg.build_sensor_context(instance=instance, definitions=defs, resources=resources))
        assert not first.run_requests
        reason = first.skip_reason.skip_message  # type: ignore[union-attr]
        assert "expert: not marked for automatic distillation" in reason
        assert "quiet: not marked for automatic distillation" in reason and "--auto-distill" in reason
        assert "dead: preflight of teacher 'dead' failed: cannot reach" in reason
        assert len(server.calls) == 0  # unmarked teachers are not even called

        capped = loopback_teacher("capped", "openai", server).model_copy(
            update={"auto_distill": True, "max_spend_usd": 0.0})
        ready = loopback_teacher("ready", "openai", server).model_copy(update={"auto_distill": True})
        write_registry(registry, quiet, dead, capped, ready)
        second = new_teacher_sensor(dg.build_sensor_context(instance=instance, definitions=defs, resources=resources,
                                                            cursor=first.cursor))
        assert [r.partition_key for r in second.run_requests] == ["ready"]  # dead is not retried at once
        assert len(server.calls) == 1  # ready's preflight; capped is never called


def test_dagster_run_config_fails_early_with_one_line(tmp_path: Path, alfworld_data: Path) -> None:
    from assets.episodes import teacher_episodes
    from pipelines.partitions import TEACHER_PARTITIONS_NAME
    from pipelines.resources import AlfworldResource, WarehouseResource

    resources = {"warehouse": WarehouseResource(path=str(tmp_path / "wh.duckdb")),
                 "alfworld": AlfworldResource(data_root=str(alfworld_data))}
    with dg.instance_for_test() as instance:
        instance.add_dynamic_partitions(TEACHER_PARTITIONS_NAME, ["expert"])
        for config, says in [({"limit": -3}, "limit must be at least 1 (got -3)"),
                             ({"concurrency": 0}, "concurrency must be at least 1 (got 0)"),
                             ({"mode": "fancy"}, "mode 'fancy' is unknown; use bpe or react")]:
            result = dg.materialize([teacher_episodes], partition_key="expert", instance=instance, resources=resources,
                                    run_config={"ops": {"teacher_episodes": {"config": config}}}, raise_on_error=False)
            assert not result.success
            (failure,) = [e for e in result.all_events if e.event_type_value == "STEP_FAILURE"]
            message = failure.step_failure_data.error.message  # type: ignore[union-attr]
            assert f"teacher_episodes config: {says}" in message and message.count("\n") <= 1
    assert not (tmp_path / "wh.duckdb").exists() or count(str(tmp_path / "wh.duckdb"),
                                                           "SELECT count(*) FROM episodes") == 0


def test_run_guard_caps_and_breaker() -> None:
    from evoharness.run_guard import RunGuard, SpendCap, StopKind

    guard = RunGuard((SpendCap(1.0, "run cap"), SpendCap(5.0, "teacher cap", spent_before_usd=4.5)), 3)
    guard.add_cost(0.3)
    assert guard.may_start()
    guard.add_cost(0.25)  # 4.5 + 0.55 passes the teacher's cap before the run's own
    assert not guard.may_start() and guard.stop_kind is StopKind.SPEND_CAP and "teacher cap" in str(guard.stop_reason)

    breaker = RunGuard(max_consecutive_failures=3)
    for kind in ("connection", "auth", None, "connection"):  # an episode's own failure neither counts nor resets
        breaker.failed(kind, "x")
    assert not breaker.may_start() and breaker.stop_kind is StopKind.CIRCUIT_BREAKER

    healed = RunGuard(max_consecutive_failures=2)
    healed.failed("connection", "x")
    healed.succeeded()
    healed.failed("connection", "x")
    assert healed.may_start()
    assert not RunGuard((SpendCap(0.05, "cap", spent_before_usd=0.05),)).may_start()  # a spent cap starts nothing
