"""Explicit lineage: two teachers' distillations overlap and each model version's lineage names only its own
episodes; the documented query answers "which episodes made this evaluation"."""

from __future__ import annotations

import re
from pathlib import Path

import dagster as dg
import pytest

from evoharness.evaluation.run import EvaluationConfig, evaluate
from evoharness.testing.alfworld_player import WalkthroughPlayer
from evoharness.testing.loopback import LoopbackServer
from evoharness.testing.teachers import loopback_teacher, write_registry
from warehouse import Warehouse, load_query

REPO = Path(__file__).resolve().parents[1]
TEACHERS = ("expert", "walker")


def _materialize(asset: dg.AssetsDefinition, teacher: str, instance: dg.DagsterInstance, resources: dict,
                 config: dict) -> dg.ExecuteInProcessResult:
    name = asset.key.to_user_string()
    result = dg.materialize([asset], instance=instance, partition_key=teacher, resources=resources,
                            run_config={"ops": {name: {"config": config}}})
    assert result.success
    return result


def _docs_query(name: str) -> str:
    """The SQL block that docs/audit.md marks with ``<!-- query: name -->``."""
    text = (REPO / "docs" / "audit.md").read_text()
    match = re.search(rf"<!-- query: {name} -->\s*```sql\n(.*?)```", text, re.DOTALL)
    assert match, f"docs/audit.md has no query {name!r}"
    return match.group(1)


@pytest.fixture(scope="module")
def overlapped(tmp_path_factory: pytest.TempPathFactory, alfworld_data: Path) -> tuple[Path, dict[str, str]]:
    """Two teachers distilled stage by stage in alternation: each stage of one runs between the same stage
    and the next of the other, so "the newest row" would hand one teacher the other's outputs."""
    import assets.consolidation as ac
    import assets.curation as cu
    import assets.episodes as ae
    import assets.training as at
    from pipelines.resources import AlfworldResource, StudentResource, TrainingLauncher, WarehouseResource

    folder = tmp_path_factory.mktemp("lineage")
    db = folder / "w.duckdb"
    resources = {"warehouse": WarehouseResource(path=str(db)), "alfworld": AlfworldResource(),
                 "students": StudentResource(recipe="tiny", models_dir=str(folder / "models")),
                 "training": TrainingLauncher(), "pipes_client": dg.PipesSubprocessClient()}
    mp = pytest.MonkeyPatch()
    with LoopbackServer(WalkthroughPlayer.for_split("train", limit=6)) as server:
        registry = write_registry(folder / "teachers.yaml",
                                  loopback_teacher("walker", "openai_compatible", server, api_key_env=None))
        mp.setenv("EVOHARNESS_TEACHERS", str(registry))
        try:
            with dg.instance_for_test() as instance:
                instance.add_dynamic_partitions("teacher", list(TEACHERS))
                stages = [
                    (ae.teacher_episodes, {"limit": 6, "engine": "fast", "workers": 0}),
                    (ac.bpe_examples, {"engine": "fast", "workers": 0, "batch_size": 3}),
                    (cu.sft_dataset, {"output_dir": str(folder / "datasets")}),
                    (at.sft_student, {"max_steps": 2, "max_length": 1024}),
                ]
                for asset, config in stages:
                    for teacher in TEACHERS:
                        _materialize(asset, teacher, instance, resources, config)
        finally:
            mp.undo()
    with Warehouse(db) as wh:
        versions = dict(wh.con.execute("SELECT teacher, model_version FROM model_versions").fetchall())
    return db, versions


def test_each_model_version_lineage_names_only_its_own_episodes(overlapped: tuple[Path, dict[str, str]]) -> None:
    db, versions = overlapped
    assert set(versions) == set(TEACHERS)
    with Warehouse(db) as wh:
        for teacher, version in versions.items():
            rows = wh.con.execute("SELECT DISTINCT teacher, episode_id, dataset_id, consolidation_run_id, "
                                  "dataset_bank_version FROM lineage WHERE model_version = ?", [version]).fetchall()
            dataset = wh.scalar("SELECT dataset_id FROM model_versions WHERE model_version = ?", [version])
            in_dataset = {r[0] for r in wh.con.execute(
                "SELECT DISTINCT episode_id FROM dataset_examples WHERE dataset_id = ?", [dataset]).fetchall()}
            own = {r[0] for r in wh.con.execute(
                "SELECT episode_id FROM episodes WHERE teacher = ? AND won", [teacher]).fetchall()}
            runs = {r[0] for r in wh.con.execute(
                "SELECT consolidation_run_id FROM consolidation_runs WHERE teacher = ?", [teacher]).fetchall()}
            own_banks = {r[0] for r in wh.con.execute(
                "SELECT version FROM experience_banks WHERE list_contains(?, consolidation_run_id)", [list(runs)]
            ).fetchall()}
            assert rows and {r[0] for r in rows} == {teacher}  # only its own teacher's episodes
            assert {r[1] for r in rows} == in_dataset and in_dataset <= own
            assert {r[2] for r in rows} == {dataset} and {r[3] for r in rows} <= runs
            assert {r[4] for r in rows} <= own_banks  # the bank its own consolidation produced, not the other's
        datasets = dict(wh.con.execute("SELECT teacher, bank_version FROM datasets").fetchall())
    assert datasets["expert"] < datasets["walker"]  # walker consolidated later: a newer bank existed for expert


def test_documented_query_answers_which_episodes_made_this_evaluation(overlapped: tuple[Path, dict[str, str]]
                                                                      ) -> None:
    db, versions = overlapped
    query = _docs_query("evaluation_sources")
    assert query.strip() == load_query("evaluation_sources").strip()  # the documented query is the shipped one
    with Warehouse(db) as wh:
        evaluate(wh, EvaluationConfig(model_version=versions["walker"], splits=("valid_seen",), limit=1,
                                      max_steps=3, max_tokens=16, engine="fast"), "eval")
        evaluation = wh.scalar("SELECT episode_id FROM episodes WHERE model_version = ?", [versions["walker"]])
        cursor = wh.con.execute(query, {"evaluation_episode_id": evaluation})
        columns = [d[0] for d in cursor.description]
        rows = [dict(zip(columns, r)) for r in cursor.fetchall()]
        expected = {r[0] for r in wh.con.execute(
            "SELECT DISTINCT episode_id FROM dataset_examples de JOIN model_versions m USING (dataset_id) "
            "WHERE m.model_version = ?", [versions["walker"]]).fetchall()}
    assert {r["episode_id"] for r in rows} == expected and expected
    assert {(r["model_version"], r["teacher"], r["teacher_provider"]) for r in rows} == {
        (versions["walker"], "walker", "openai_compatible")}
    assert all(r["prompt_sha"] and r["episode_bank"] and r["consolidator"] == "rule" and r["consolidation_run_id"]
               and r["episode_code_version"] and r["episode_run_id"] and r["model_run_id"] for r in rows)
