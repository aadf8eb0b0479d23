"""Curation: filters, dedup, balance, split by game, HF dataset on disk, eval games never admitted; Dagster gating."""

from __future__ import annotations

import json
from pathlib import Path

import dagster as dg
import datasets
import pytest

from evoharness.collection import CollectionConfig, collect
from evoharness.consolidation.config import ConsolidationConfig
from evoharness.consolidation.pipeline import consolidate
from evoharness.consolidation.rules import RuleConsolidator
from evoharness.curation.build import curate, split_games
from evoharness.curation.config import CurationConfig
from evoharness.curation.guard import EvalLeakError, assert_train_only
from evoharness.harness.prompts import Mode
from tests.test_consolidation import make_episodes
from warehouse import Warehouse


@pytest.fixture(scope="module")
def db(tmp_path_factory: pytest.TempPathFactory, alfworld_data: Path) -> Path:
    path = tmp_path_factory.mktemp("curation") / "w.duckdb"
    make_episodes(path, games=12)
    with Warehouse(path) as wh:  # evaluation games in the same warehouse, consolidated too
        collect(CollectionConfig(mode=Mode.BPE, split="valid_seen", limit=3, workers=0, engine="fast"), wh, "t")
    consolidate(ConsolidationConfig(engine="fast", workers=0, splits=("train", "valid_seen")), path,
                RuleConsolidator(), "t")
    return path


def test_dataset_on_disk(db: Path, tmp_path: Path) -> None:
    with Warehouse(db) as wh:
        result = curate(wh, CurationConfig(output_dir=str(tmp_path)), "run")
        row = wh.con.execute("SELECT n_train, n_validation, composition, bank_version, source_episodes FROM datasets"
                             ).fetchone()
        leaks = wh.con.execute("SELECT count(*) FROM curation_leaks").fetchone()[0]
        games = dict(wh.con.execute("SELECT game_id, split FROM games").fetchall())
    loaded = datasets.load_from_disk(result.path)
    assert set(loaded) == {"train", "validation"}
    assert (len(loaded["train"]), len(loaded["validation"])) == (row[0], row[1]) == (result.n_train, result.n_validation)
    assert loaded["train"][0]["messages"][0]["role"] == "system"
    assert [m["role"] for m in loaded["train"][0]["messages"]] == ["system", "user", "assistant"]
    train_games, valid_games = set(loaded["train"]["game_id"]), set(loaded["validation"]["game_id"])
    assert train_games and valid_games and not train_games & valid_games  # split by game, never by step
    assert all(games[g] == "train" for g in train_games | valid_games) and leaks == 0
    assert result.dropped["not a train-split game"] == 3
    assert result.dropped["exact duplicate"] >= 10  # the bpe and react logs of a game replay identically
    with Warehouse(db) as wh:
        won = wh.con.execute("SELECT bool_and(won) FROM episodes WHERE list_contains(?, episode_id)",
                             [json.loads(row[4])]).fetchone()[0]
    assert won
    composition = json.loads(row[2])
    assert set(composition["task_type"]) == {"pick_and_place_simple", "look_at_obj_in_light",
                                             "pick_clean_then_place_in_recep", "pick_heat_then_place_in_recep",
                                             "pick_cool_then_place_in_recep", "pick_two_obj_and_place"}
    with Warehouse(db) as wh:  # the cap: 1.5 × the train episodes of the type played least
        least_played = wh.con.execute("SELECT min(n) FROM (SELECT count(*) AS n FROM episodes WHERE split = 'train' "
                                      "GROUP BY task_type)").fetchone()[0]
    assert max(composition["episodes_by_task_type"].values()) <= 1.5 * least_played
    assert row[3] >= 1 and len(json.loads(row[4])) == sum(composition["episodes_by_task_type"].values())
    with Warehouse(db) as wh:
        again = curate(wh, CurationConfig(output_dir=str(tmp_path)), "run2")
    assert again.reused and again.dataset_id == result.dataset_id


def test_token_limit_drops_long_examples(db: Path, tmp_path: Path) -> None:
    with Warehouse(db) as wh:
        result = curate(wh, CurationConfig(name="short", max_tokens=900, output_dir=str(tmp_path)), "run")
    assert result.dropped["examples over max_tokens"] > 0
    lengths = [len("".join(m["content"] for m in ex["messages"]).encode()) / 4
               for ex in datasets.load_from_disk(result.path)["train"]]
    assert max(lengths) <= 900 + 3


def test_guard_refuses_eval_games() -> None:
    with pytest.raises(EvalLeakError):
        assert_train_only([("train/a/b", "train"), ("valid_seen/x/y", "valid_seen")])
    with pytest.raises(EvalLeakError):
        assert_train_only([("valid_unseen/x/y", "train")])  # a mislabelled split is caught by the id too
    assert_train_only([("train/a/b", "train")])
    split = split_games({f"train/g{i}/t" for i in range(40)}, 0.1)
    assert 0 < list(split.values()).count("validation") < 40


def _materialize(db: Path, tmp: Path, consolidation: dict, server_url: str | None = None) -> dg.ExecuteInProcessResult:
    import assets.consolidation as ac
    import assets.curation as cu
    from pipelines.partitions import register_teachers
    from pipelines.resources import AlfworldResource, WarehouseResource

    instance = dg.DagsterInstance.ephemeral()
    register_teachers(instance)
    return dg.materialize(
        [ac.bpe_examples, ac.bpe_examples_quality, cu.sft_dataset, cu.sft_dataset_no_eval_games],
        instance=instance, partition_key="expert", raise_on_error=False,
        resources={"warehouse": WarehouseResource(path=str(db)), "alfworld": AlfworldResource()},
        run_config={"ops": {"bpe_examples": {"config": consolidation},
                            "sft_dataset": {"config": {"output_dir": str(tmp), "consolidator":
                                                       consolidation.get("consolidator", "rule")}}}},
    )


def test_dagster_rule_path_materializes_a_clean_dataset(tmp_path: Path, alfworld_data: Path) -> None:
    db = tmp_path / "w.duckdb"
    make_episodes(db, games=6)
    result = _materialize(db, tmp_path, {"engine": "fast", "workers": 0})
    assert result.success
    checks = {e.asset_check_key.name: e.passed for e in result.get_asset_check_evaluations()}
    assert checks == {"bpe_examples_quality": True, "sft_dataset_no_eval_games": True}
    path = next(m for m in result.get_asset_materialization_events()
                if m.asset_key.to_user_string() == "sft_dataset").materialization.metadata["path"].value
    assert len(datasets.load_from_disk(path)["train"]) > 0


def test_dagster_blocking_check_stops_curation(tmp_path: Path, alfworld_data: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    from evoharness.testing.loopback import LoopbackServer, Reply
    from evoharness.testing.teachers import loopback_teacher, write_registry

    db = tmp_path / "w.duckdb"
    make_episodes(db, games=3)
    wrong = {"insertions": [{"before_step": 0, "kind": "commit", "argument": "put nothing in nowhere",
                             "think": "t"}], "lessons": []}
    with LoopbackServer(lambda call: Reply(text=json.dumps(wrong))) as server:
        registry = write_registry(tmp_path / "teachers.yaml",
                                  loopback_teacher("consolidator", "openai_compatible", server, api_key_env=None))
        monkeypatch.setenv("EVOHARNESS_TEACHERS", str(registry))
        result = _materialize(db, tmp_path, {"engine": "fast", "workers": 0, "consolidator": "llm"})
    checks = {e.asset_check_key.name: e.passed for e in result.get_asset_check_evaluations()}
    materialized = {m.asset_key.to_user_string() for m in result.get_asset_materialization_events()}
    assert checks.get("bpe_examples_quality") is False
    assert materialized == {"bpe_examples"}  # sft_dataset never ran
    with Warehouse(db) as wh:
        assert wh.con.execute("SELECT count(*) FROM datasets").fetchone()[0] == 0


def test_columnar_selection_chooses_what_todays_loops_choose(db: Path, tmp_path: Path) -> None:
    """The columnar path (polars + MinHash LSH) and the reference (Python loops, all pairs) build the same data."""
    from benchmarks.curation_reference import curate_reference

    with Warehouse(db) as wh:
        columnar = curate(wh, CurationConfig(name="columnar", output_dir=str(tmp_path)), "c")
        reference = curate_reference(wh, CurationConfig(name="reference", output_dir=str(tmp_path)), "r")
        examples = {name: wh.con.execute("SELECT episode_id, turn, dataset_split, consolidation_run_id FROM "
                                         "dataset_examples WHERE dataset_id = ? ORDER BY ALL", [d.dataset_id]).fetchall()
                    for name, d in (("columnar", columnar), ("reference", reference))}
        banks = wh.con.execute("SELECT DISTINCT bank_version FROM datasets WHERE name IN ('columnar', 'reference')"
                               ).fetchall()
    assert examples["columnar"] == examples["reference"] and examples["columnar"]
    assert (columnar.n_train, columnar.n_validation) == (reference.n_train, reference.n_validation)
    assert sum(columnar.dropped.values()) == sum(reference.dropped.values()) and len(banks) == 1
    on_disk = [datasets.load_from_disk(d.path)["train"] for d in (columnar, reference)]
    assert on_disk[0]["messages"] == on_disk[1]["messages"] and on_disk[0].column_names == on_disk[1].column_names


def test_minhash_near_duplicates_match_all_pairs() -> None:
    """Synthetic trajectories with known overlaps: LSH finds exactly the all-pairs near duplicates."""
    import random

    import polars as pl

    from benchmarks.curation_reference import _bigrams, jaccard
    from evoharness.curation.minhash import near_duplicates

    rng = random.Random(0)
    vocabulary = [f"go to place {i}" for i in range(40)] + [f"take thing {i}" for i in range(40)]
    games, commands = [], []
    for game in range(30):
        base = [rng.choice(vocabulary) for _ in range(25)]
        for _ in range(12):
            variant = list(base)
            for _ in range(rng.choice([0, 0, 1, 2, 6, 12])):  # some near copies, some far
                variant[rng.randrange(len(variant))] = rng.choice(vocabulary)
            games.append(f"train/g{game}")
            commands.append(variant)
    expected, kept = [], []
    for game, cmds in zip(games, commands, strict=True):  # the all-pairs greedy scan
        dup = any(g == game and jaccard(_bigrams(cmds), _bigrams(c)) >= 0.9 for g, c in kept)
        expected.append(dup)
        if not dup:
            kept.append((game, cmds))
    found = near_duplicates(games, pl.Series(commands, dtype=pl.List(pl.String)), 0.9)
    assert found.tolist() == expected and 0 < sum(expected) < len(expected)


def test_lineage_of_a_dataset_curated_before_dataset_examples_is_backfilled_from_its_folder(curated_db: Path) -> None:
    from evoharness.curation.backfill import (
        BackfillError,
        backfill_dataset_examples,
        datasets_without_lineage,
    )

    with Warehouse(curated_db) as wh:
        dataset_id = wh.scalar("SELECT dataset_id FROM datasets")
        before = sorted(wh.con.execute("SELECT * FROM dataset_examples").fetchall())
        wh.con.execute("DELETE FROM dataset_examples")  # as a warehouse curated before migration 030 has it
        assert datasets_without_lineage(wh) == [dataset_id]
        assert backfill_dataset_examples(wh, dataset_id) == len(before)
        assert sorted(wh.con.execute("SELECT * FROM dataset_examples").fetchall()) == before
        assert backfill_dataset_examples(wh, dataset_id) == 0  # idempotent

        wh.con.execute("DELETE FROM dataset_examples")
        wh.con.execute("DELETE FROM bpe_examples WHERE (episode_id, turn) IN "
                       "(SELECT (episode_id, turn) FROM bpe_examples LIMIT 1)")
        with pytest.raises(BackfillError, match="no longer in bpe_examples"):
            backfill_dataset_examples(wh, dataset_id)
        assert wh.scalar("SELECT count(*) FROM dataset_examples") == 0  # nothing half-written


def _candidates(played: dict[str, int], won: dict[str, int]) -> list:
    """Synthetic train episodes, each its own game with distinct commands: ``played`` per task type, the first
    ``won`` of them won."""
    from benchmarks.curation_reference import Candidate

    return [Candidate(episode_id=f"{kind}-{i}", game_id=f"train/{kind}-{i}", catalog_split="train", split="train",
                      task_type=kind, teacher="t", won=i < won[kind], source_mode="bpe", action_sig=f"{kind}-{i}",
                      n_examples=3, consolidation_run_id="c", belief_precision=1.0, belief_recall=1.0,
                      progress_validity=1.0, parse_validity=1.0, commands=[f"go to {kind} {i}", f"take {i}"],
                      stable_key=f"{kind}-{i}")
            for kind, n in played.items() for i in range(n)]


@pytest.mark.parametrize(("played", "won", "kept"), [
    # a balanced game mix: a type the teacher plays badly does not cut the others (cap 1.5 × 10 played)
    ({"a": 10, "b": 10, "c": 10}, {"a": 2, "b": 10, "c": 9}, {"a": 2, "b": 10, "c": 9}),
    # a skewed game mix is balanced: c played 40 times is cut to 1.5 × 10
    ({"a": 10, "b": 10, "c": 40}, {"a": 10, "b": 10, "c": 40}, {"a": 10, "b": 10, "c": 15}),
])
def test_the_task_type_cap_follows_the_games_played_not_won(played: dict[str, int], won: dict[str, int],
                                                             kept: dict[str, int]) -> None:
    from collections import Counter
    from dataclasses import asdict

    import polars as pl

    from benchmarks.curation_reference import select_episodes
    from evoharness.curation.select import select_columnar

    candidates = _candidates(played, won)
    reference = select_episodes(candidates, CurationConfig())
    columnar = select_columnar(pl.DataFrame([asdict(c) for c in candidates]), CurationConfig())
    assert Counter(c.task_type for c in reference.chosen) == kept
    assert Counter(columnar.chosen["task_type"].to_list()) == kept
    assert reference.dropped == columnar.dropped
