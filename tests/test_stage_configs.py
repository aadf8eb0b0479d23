"""One config per stage: the command line, the Dagster run config and the library's config class declare the
same defaults (the library's class is the declaration; the other two read it)."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from enum import Enum
from typing import Any

import pytest

from evoharness.stage_config import defaults

# CLI option → library field, where the names differ. A list option whose CLI default is None takes the
# library's default (typer cannot show a tuple default), so None there stands for "the library default".
RENAMED = {"seed": "seeds", "split": "splits", "llm_teacher": "llm.teacher", "llm_max_attempts": "llm.max_attempts"}
NOT_CONFIG = {"db", "force", "dry_run", "teacher", "model_version", "dataset"}  # what/where to run, not a parameter


def _plain(value: Any) -> Any:
    if isinstance(value, Enum):
        return value.value
    return list(value) if isinstance(value, tuple) else value


def _library(config_class: type, nested: dict[str, type] | None = None) -> dict[str, Any]:
    values = defaults(config_class)
    for prefix, nested_class in (nested or {}).items():
        values |= {f"{prefix}.{k}": v for k, v in defaults(nested_class).items()}
    return values


def _cli(command: Callable[..., Any], library: dict[str, Any]) -> dict[str, Any]:
    values = {}
    for name, parameter in inspect.signature(command).parameters.items():
        if name in NOT_CONFIG:
            continue
        field = RENAMED[name] if RENAMED.get(name) in library else name
        default = parameter.default
        values[field] = library.get(field) if default is None and isinstance(library.get(field), list) else _plain(
            default)
    return values


def _dagster(config_class: type) -> dict[str, Any]:
    renamed = {"llm_teacher": "llm.teacher", "llm_max_attempts": "llm.max_attempts"}
    return {renamed.get(name, name): _plain(field.get_default(call_default_factory=True))
            for name, field in config_class.model_fields.items() if name not in NOT_CONFIG}


def _stages() -> list[tuple[str, dict[str, Any], Callable[..., Any], type]]:
    from assets.consolidation import ConsolidationRunConfig
    from assets.curation import CurationRunConfig
    from assets.episodes import CollectionRunConfig
    from assets.evaluation import EvaluationRunConfig
    from evoharness.collection import CollectionConfig
    from evoharness.consolidation.config import ConsolidationConfig, LLMSettings
    from evoharness.curation.config import CurationConfig
    from evoharness.evaluation.run import EvaluationConfig
    from evoharness_cli.cli import collect_command
    from evoharness_cli.cli_data import consolidate_command, curate_command
    from evoharness_cli.cli_evaluation import evaluate_command

    return [
        ("collection", _library(CollectionConfig), collect_command, CollectionRunConfig),
        ("consolidation", _library(ConsolidationConfig, {"llm": LLMSettings}), consolidate_command,
         ConsolidationRunConfig),
        ("curation", _library(CurationConfig), curate_command, CurationRunConfig),
        ("evaluation", _library(EvaluationConfig), evaluate_command, EvaluationRunConfig),
    ]


@pytest.mark.parametrize("stage", ["collection", "consolidation", "curation", "evaluation"])
def test_cli_dagster_and_library_defaults_are_equal(stage: str) -> None:
    name, library, command, run_config = next(s for s in _stages() if s[0] == stage)
    cli, dagster = _cli(command, library), _dagster(run_config)
    assert set(cli) <= set(library), f"{name}: CLI options without a library field: {set(cli) - set(library)}"
    assert set(dagster) <= set(library), f"{name}: Dagster fields without a library field: {set(dagster) - set(library)}"
    assert {k: library[k] for k in cli} == cli
    assert {k: library[k] for k in dagster} == dagster
    shared = set(cli) & set(dagster)
    assert len(shared) >= 5, f"{name}: CLI and Dagster share too few parameters: {sorted(shared)}"


def test_a_disagreeing_default_is_caught() -> None:
    """The check itself can fail: a Dagster default that differs from the library's is reported."""
    import dagster as dg
    from pydantic import Field

    from evoharness.collection import CollectionConfig

    class Drifted(dg.Config):
        split: str = Field(default="valid_seen")

    library = _library(CollectionConfig)
    assert {k: library[k] for k in _dagster(Drifted)} != _dagster(Drifted)
