"""Registry: typed entries, teachers.yaml round trip, the CLI (yaml + warehouse + Dagster partition),
build_policy by name, and the sensor that adds teacher partitions (runs are opt-in)."""

from __future__ import annotations

from pathlib import Path

import dagster as dg
import pytest
import yaml
from pydantic import ValidationError
from typer.testing import CliRunner

from evoharness.harness.prompts import Mode
from evoharness.teachers.expert import ExpertTeacher
from evoharness.teachers.factory import build_policy
from evoharness.teachers.llm import LLMTeacher
from evoharness.teachers.registry import EXPERT, Provider, TeacherRegistry, TeacherSpec
from evoharness_cli.cli import app
from pipelines.partitions import TEACHER_PARTITIONS_NAME
from warehouse import Warehouse


def spec(**overrides: object) -> TeacherSpec:
    fields: dict[str, object] = {"name": "claude", "provider": "anthropic", "model": "claude-x",
                                 "api_key_env": "ANTHROPIC_API_KEY", "price_in": 3.0, "price_out": 15.0}
    return TeacherSpec(**(fields | overrides))  # type: ignore[arg-type]


def test_spec_validation() -> None:
    assert spec().cost_usd(1_000_000, 100_000) == pytest.approx(3.0 + 1.5)
    assert spec(price_in=None).cost_usd(10, 10) is None
    with pytest.raises(ValidationError, match="api-key-env"):
        spec(api_key_env=None)
    with pytest.raises(ValidationError, match="base-url"):
        spec(provider="openai_compatible", base_url=None)
    with pytest.raises(ValidationError, match="pattern"):
        spec(api_key_env="sk-ant-api03-PASTED-KEY")  # a key where a variable name belongs
    with pytest.raises(ValidationError):
        spec(name="Bad Name")
    with pytest.raises(ValidationError):
        spec(max_concurrency=0)
    assert spec(mode="react").prompt_id(Mode.REACT) == "alfworld/react"


def test_yaml_round_trip_keeps_expert(tmp_path: Path) -> None:
    path = tmp_path / "teachers.yaml"
    registry = TeacherRegistry([], path)
    assert registry.add(spec())
    assert not registry.add(spec())  # unchanged
    registry.save()
    loaded = TeacherRegistry.load(path)
    assert loaded.names() == ["expert", "claude"]
    assert loaded.get("claude") == spec()
    assert loaded.get("expert") == EXPERT
    raw = yaml.safe_load(path.read_text())
    assert raw["version"] == 1 and raw["teachers"][1]["api_key_env"] == "ANTHROPIC_API_KEY"
    with pytest.raises(KeyError, match="registered: expert, claude"):
        loaded.get("nope")


def test_repository_registry_has_expert() -> None:
    registry = TeacherRegistry.load(Path(__file__).resolve().parents[1] / "teachers.yaml")
    assert registry.get("expert").provider is Provider.EXPERT


def test_build_policy_resolves_registry_names(monkeypatch: pytest.MonkeyPatch) -> None:
    registry = TeacherRegistry([spec(), spec(name="local", provider="local_hf", model="/models/tiny", api_key_env=None)])
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-test-123456")
    claude = build_policy("claude", Mode.REACT, registry)
    assert isinstance(claude, LLMTeacher) and claude.name == "claude" and claude.mode is Mode.REACT
    assert not claude.needs_expert
    assert isinstance(build_policy("local", Mode.BPE, registry), LLMTeacher)
    assert isinstance(build_policy("expert", Mode.BPE, registry), ExpertTeacher)
    monkeypatch.delenv("ANTHROPIC_API_KEY")
    with pytest.raises(ValueError, match=r"\$ANTHROPIC_API_KEY, which is not set"):
        build_policy("claude", Mode.BPE, registry)


@pytest.fixture
def dagster_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    home = tmp_path / "dagster_home"
    home.mkdir()
    (home / "dagster.yaml").write_text("telemetry:\n  enabled: false\n")
    monkeypatch.setenv("DAGSTER_HOME", str(home))
    return home


def test_cli_add_writes_yaml_and_warehouse_and_init_derives_partitions(tmp_path: Path, dagster_home: Path) -> None:
    registry, db = tmp_path / "teachers.yaml", tmp_path / "wh.duckdb"
    runner = CliRunner()
    result = runner.invoke(app, [
        "teacher", "add", "gpt-test", "--provider", "openai", "--model", "gpt-x", "--api-key-env", "OPENAI_API_KEY",
        "--price-in", "1.25", "--price-out", "10", "--max-concurrency", "16", "--mode", "react",
        "--registry", str(registry), "--db", str(db),
    ])
    assert result.exit_code == 0, result.output
    assert "new_teacher_sensor adds the teacher's partition" in result.output
    loaded = TeacherRegistry.load(registry).get("gpt-test")
    assert (loaded.provider, loaded.model, loaded.max_concurrency, loaded.mode) == (
        Provider.OPENAI, "gpt-x", 16, Mode.REACT)
    with Warehouse(db) as wh:
        rows = wh.con.execute("SELECT name, provider, api_key_env, price_in, price_out, max_concurrency "
                              "FROM teachers ORDER BY name").fetchall()
    assert rows == [("expert", "expert", None, None, None, 64),
                    ("gpt-test", "openai", "OPENAI_API_KEY", 1.25, 10.0, 16)]
    with dg.DagsterInstance.get() as instance:  # the registry is the truth: Dagster derives its partitions
        assert instance.get_dynamic_partitions(TEACHER_PARTITIONS_NAME) == []
    init = runner.invoke(app, ["init", "--db", str(db)], env={"EVOHARNESS_TEACHERS": str(registry)})
    assert init.exit_code == 0, init.output
    with dg.DagsterInstance.get() as instance:
        assert set(instance.get_dynamic_partitions(TEACHER_PARTITIONS_NAME)) == {"expert", "gpt-test"}
    listed = runner.invoke(app, ["teacher", "list", "--registry", str(registry)])
    assert listed.exit_code == 0 and "gpt-test" in listed.output and "OPENAI_API_KEY" in listed.output


def test_cli_rejects_a_pasted_key_without_echoing_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("DAGSTER_HOME", raising=False)
    pasted = "sk-ant-api03-DoNotEchoMe0123456789"
    result = CliRunner().invoke(app, [
        "teacher", "add", "leaky", "--provider", "anthropic", "--model", "m", "--api-key-env", pasted,
        "--registry", str(tmp_path / "t.yaml"), "--db", str(tmp_path / "wh.duckdb"),
    ])
    assert result.exit_code != 0
    assert "api_key_env" in result.output
    assert "DoNotEchoMe" not in result.output
    assert not (tmp_path / "t.yaml").exists()


def test_sensor_adds_partitions_but_starts_no_unmarked_teacher(tmp_path: Path, monkeypatch: pytest.MonkeyPatch
                                                               ) -> None:
    """Automation is opt-in: registered teachers get their partitions, and runs only with ``auto_distill``
    (marked teachers and their preflight: tests/test_cli_safety.py)."""
    from pipelines.definitions import defs
    from pipelines.resources import WarehouseResource
    from pipelines.sensors import distillation_run_config, new_teacher_sensor

    path = tmp_path / "teachers.yaml"
    claude = spec(max_concurrency=12, mode="react", distill_games=40)
    TeacherRegistry([claude], path).save()
    monkeypatch.setenv("EVOHARNESS_TEACHERS", str(path))
    resources = {"warehouse": WarehouseResource(path=str(tmp_path / "wh.duckdb"))}
    assert distillation_run_config(claude)["ops"]["teacher_episodes"]["config"] == {
        "split": "train", "limit": 40, "mode": "react", "concurrency": 12}
    assert new_teacher_sensor.job_name == "distill_teacher"
    with dg.instance_for_test() as instance:
        result = new_teacher_sensor(dg.build_sensor_context(instance=instance, definitions=defs, resources=resources))
        assert not result.run_requests
        assert "claude: not marked for automatic distillation" in result.skip_reason.skip_message  # type: ignore[union-attr]
        (added,) = result.dynamic_partitions_requests
        assert set(added.partition_keys) == {"expert", "claude"}

        instance.add_dynamic_partitions(TEACHER_PARTITIONS_NAME, ["expert", "claude"])
        for name in ("expert", "claude"):
            instance.report_runless_asset_event(dg.AssetMaterialization(asset_key="teacher_episodes", partition=name))
        idle = new_teacher_sensor(dg.build_sensor_context(instance=instance, definitions=defs, resources=resources))
        assert not idle.run_requests and not idle.dynamic_partitions_requests
        assert "every registered teacher has episodes" in idle.skip_reason.skip_message  # type: ignore[union-attr]

        instance.add_dynamic_partitions(TEACHER_PARTITIONS_NAME, ["gone"])  # not in the registry (the truth)
        stale = new_teacher_sensor(dg.build_sensor_context(instance=instance, definitions=defs, resources=resources))
        (removed,) = stale.dynamic_partitions_requests
        assert isinstance(removed, dg.DeleteDynamicPartitionsRequest) and list(removed.partition_keys) == ["gone"]


def test_warehouse_teachers_table_is_derived_from_the_registry(tmp_path: Path) -> None:
    """The registry file is the truth: the table follows it; a row whose entry left it stays, marked."""
    from evoharness.teachers.registry import reconcile_warehouse

    with Warehouse(tmp_path / "w.duckdb") as wh:
        assert reconcile_warehouse(wh, TeacherRegistry([spec()], tmp_path / "t.yaml")) == []
        assert reconcile_warehouse(wh, TeacherRegistry([], tmp_path / "t.yaml")) == ["claude"]
        rows = wh.con.execute("SELECT name, in_registry FROM teachers ORDER BY name").fetchall()
        kinds = wh.con.execute("SELECT DISTINCT policy_kind FROM policies").fetchall()
    assert rows == [("claude", False), ("expert", True)] and kinds == [("teacher",)]


def test_a_bank_version_is_part_of_an_entry_only_when_set() -> None:
    """Entries from before ``bank_version`` existed keep their sha (so their run keys and rows stay); setting it is
    an edit."""
    assert EXPERT.sha256 == "eb10607c372077f48a320d3eb941e8c23d5bb18b771ce2a26bfe9cd98f5bfc9b"
    assert EXPERT.model_copy(update={"bank_version": 3}).sha256 != EXPERT.sha256
