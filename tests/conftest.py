"""Shared fixtures: the real ALFWorld data, a temporary warehouse, single-threaded torch."""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[1]
os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("ALFWORLD_DATA", str(REPO.parent / "shared" / "alfworld"))


@pytest.fixture(scope="session")
def alfworld_data() -> Path:
    """The ALFWorld data folder (``$ALFWORLD_DATA``, default ``../shared/alfworld``); tests need it."""
    from evoharness.envs.alfworld.catalog import resolve_data_root

    return resolve_data_root()


@pytest.fixture(scope="session")
def catalog(alfworld_data: Path):
    from evoharness.envs.alfworld.catalog import GameCatalog

    return GameCatalog(alfworld_data)


@pytest.fixture()
def warehouse(tmp_path: Path):
    from warehouse import Warehouse

    with Warehouse(tmp_path / "test.duckdb") as wh:
        yield wh


@pytest.fixture(scope="session")
def curated(tmp_path_factory: pytest.TempPathFactory, alfworld_data: Path) -> tuple[Path, str]:
    """A warehouse with expert episodes on 6 train games, consolidated and curated; (db, dataset path)."""
    from evoharness.consolidation.config import ConsolidationConfig
    from evoharness.consolidation.pipeline import consolidate
    from evoharness.consolidation.rules import RuleConsolidator
    from evoharness.curation.build import curate
    from evoharness.curation.config import CurationConfig
    from tests.test_consolidation import make_episodes
    from warehouse import Warehouse

    folder = tmp_path_factory.mktemp("sft")
    db = folder / "w.duckdb"
    make_episodes(db, games=6)
    consolidate(ConsolidationConfig(engine="fast", workers=0), db, RuleConsolidator(), "t")
    with Warehouse(db) as wh:
        dataset = curate(wh, CurationConfig(output_dir=str(folder / "datasets")), "t")
    assert dataset.n_train > 20 and dataset.n_validation > 0
    return db, dataset.path


@pytest.fixture()
def curated_db(curated: tuple[Path, str], tmp_path: Path) -> Path:
    """A private copy of the ``curated`` warehouse, for tests that write to it."""
    import shutil

    return Path(shutil.copy(curated[0], tmp_path / "curated.duckdb"))


def recipe_settings(recipe: str, section: str, **overrides: Any) -> Any:
    """The settings of a recipe's ``section`` with ``overrides``, validated as that stage's settings."""
    from evoharness.training.recipes import load_recipe

    base = getattr(load_recipe(recipe), section)
    return type(base).model_validate(base.model_dump() | overrides)


def write_recipe(folder: Path, name: str = "quick", base: str = "tiny", **sections: dict[str, Any]) -> Path:
    """A recipe file ``<folder>/<name>.yaml``: the shipped ``base`` recipe with ``sections``' values set (a section
    given as None is removed)."""
    import yaml

    from evoharness.training.recipes import recipe_path

    data = yaml.safe_load(recipe_path(base).read_text())
    for section, values in sections.items():
        data[section] = None if values is None else (data.get(section) or {}) | values
    path = Path(folder) / f"{name}.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def tiny_sft_settings(**overrides: Any) -> Any:
    return recipe_settings("tiny", "sft", **overrides)


def tiny_grpo_settings(**overrides: Any) -> Any:
    return recipe_settings("tiny", "grpo", **overrides)


def train_sft_version(wh: Any, dataset_id: str, settings: Any, models_root: Any, run_id: str,
                      parent_version: str | None = None, on_log: Any = None) -> Any:
    """Train (or reuse) an SFT version in this process through the one realize path."""
    from evoharness.training.model_versions import plan_sft_version
    from evoharness.training.realize import InProcess, realize

    return realize(wh, lambda w: plan_sft_version(w, dataset_id, settings, models_root, run_id, parent_version),
                   InProcess(on_log))


def train_grpo_version(wh: Any, parent_version: str, settings: Any, models_root: Any, run_id: str,
                       data_root: str | None = None, engine: str | None = None, on_log: Any = None) -> Any:
    """Train (or reuse) a GRPO version in this process through the one realize path."""
    from evoharness.training.model_versions import plan_grpo_version
    from evoharness.training.realize import InProcess, realize

    return realize(wh, lambda w: plan_grpo_version(w, parent_version, settings, models_root, run_id, data_root,
                                                   engine), InProcess(on_log))


def subprocess_env() -> dict[str, str]:
    """The environment for a child Python process: this checkout first on ``PYTHONPATH``, so the child runs
    this worktree's code (not the installed copy)."""
    return os.environ | {"PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}


@pytest.fixture(scope="session")
def tiny_grpo(tmp_path_factory: pytest.TempPathFactory, catalog) -> tuple[Path, object, list[str]]:
    """A randomly initialised tiny student and fixed expert rollouts of its first two train games, a group of two
    (a 30-step and a 4-step budget, so the group's rewards differ): (model folder, FixedRollouts, game ids)."""
    from transformers import AutoTokenizer

    from evoharness.training.fixed_rollouts import record_expert_rollouts
    from evoharness.training.tiny_student import TinyStudentSpec, build_tiny_student

    games = [g.game_id for g in catalog.games("train", 2)]
    corpus = [p.read_text() for p in (REPO / "teacher_prompts" / "alfworld").glob("*.j2")]
    model_dir = build_tiny_student(tmp_path_factory.mktemp("grpo") / "model", corpus, TinyStudentSpec(vocab_size=512))
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    fixed = record_expert_rollouts(games, tokenizer, group=2, budgets=(30, 4), prompt_tokens=48, completion_tokens=16)
    return model_dir, fixed, games


OVERFIT_SETTINGS = {"prompt_set": "alfworld/bpe_student", "epochs": 100, "learning_rate": 3e-3, "batch_size": 4,
                    "per_device_batch_size": 4, "max_length": 1024, "logging_steps": 50, "save_steps": 10_000}


@pytest.fixture(scope="module")  # each module its own: their tests write to it
def overfit(tmp_path_factory: pytest.TempPathFactory, alfworld_data: Path) -> tuple[Path, str, Path]:
    """(warehouse, SFT model version, models folder): a tiny student trained on one train game's expert turns
    in the compact student rendering (10 turns, 100 passes)."""
    from evoharness.collection import CollectionConfig, collect
    from evoharness.consolidation.config import ConsolidationConfig
    from evoharness.consolidation.pipeline import consolidate
    from evoharness.consolidation.rules import RuleConsolidator
    from evoharness.curation.build import curate
    from evoharness.curation.config import CurationConfig
    from warehouse import Warehouse

    folder = tmp_path_factory.mktemp("overfit")
    db = folder / "w.duckdb"
    with Warehouse(db) as wh:
        collect(CollectionConfig(split="train", limit=1, engine="fast", workers=0), wh, "t")
    consolidate(ConsolidationConfig(engine="fast", workers=0), db, RuleConsolidator(), "t")
    with Warehouse(db) as wh:
        dataset = curate(wh, CurationConfig(output_dir=str(folder / "datasets"), validation_fraction=0.0), "t")
        settings = tiny_sft_settings(**OVERFIT_SETTINGS)
        version = train_sft_version(wh, dataset.dataset_id, settings, folder / "models", "t")
    return db, version.model_version, folder / "models"


def benchmark_module(name: str) -> ModuleType:
    """benchmarks/<name>.py as a module (benchmarks are scripts that import their helpers by name)."""
    sys.path.insert(0, str(REPO / "benchmarks"))
    try:
        spec = importlib.util.spec_from_file_location(f"{name}_benchmark", REPO / "benchmarks" / f"{name}.py")
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    finally:
        sys.path.remove(str(REPO / "benchmarks"))
    return module


@pytest.fixture(scope="session")
def students() -> ModuleType:
    """benchmarks/students.py as a module."""
    return benchmark_module("students")
