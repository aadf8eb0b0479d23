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


EVALUATION_ONLY_IN_THE_LIBRARY = {"workers", "data_root"}  # the collection's default; $ALFWORLD_DATA or the resource


def test_evaluation_options_are_its_config_fields_with_their_descriptions() -> None:
    """The CLI's and Dagster's evaluation fields are EvaluationConfig's, each with its type's nullability, default and
    description: written once, in the library."""
    import inspect
    from typing import get_args

    from assets.evaluation import EvaluationRunConfig
    from evoharness.evaluation.run import EvaluationConfig
    from evoharness.training.recipes import option_fields
    from evoharness_cli.cli_evaluation import evaluate_command

    library = {f.name: f.description for f in option_fields(EvaluationConfig)}
    cli = inspect.signature(evaluate_command).parameters
    help_texts = {name: get_args(cli[name].annotation)[1].help for name in library if name in cli}
    assert set(library) - set(help_texts) == EVALUATION_ONLY_IN_THE_LIBRARY
    assert help_texts == {name: library[name] for name in help_texts} and all(help_texts.values())
    dagster = EvaluationRunConfig.model_fields
    assert set(library) - set(dagster) == EVALUATION_ONLY_IN_THE_LIBRARY | {"model_version", "checkpoint"}
    assert {name: dagster[name].description for name in library if name in dagster} == \
        {name: library[name] for name in library if name in dagster}
    assert dagster["max_steps"].annotation is int and cli["max_steps"].default == 70


def test_dagster_evaluation_config_takes_enum_values_as_the_cli_does() -> None:
    """``mode: react`` and ``structured_outputs: vllm-guided`` in run config build the library's config (Dagster's own
    enum config would want the members' names, REACT and VLLM_GUIDED)."""
    import dagster as dg

    from assets.evaluation import EvaluationRunConfig
    from evoharness.evaluation.run import EvaluationConfig
    from evoharness.harness.prompts import Mode
    from evoharness.teachers.clients.structured import StructuredOutputs

    built: list[EvaluationConfig] = []

    def probe(config: EvaluationRunConfig) -> None:
        built.append(EvaluationConfig(model_version="v", **config.model_dump()))

    probe.__annotations__["config"] = EvaluationRunConfig  # this module's annotations are strings
    run_config = {"mode": "react", "structured_outputs": "vllm-guided", "serve_url": "http://127.0.0.1:1/v1"}
    assert dg.materialize([dg.asset(probe)], run_config={"ops": {"probe": {"config": run_config}}}).success
    assert built[0].mode is Mode.REACT and built[0].structured_outputs is StructuredOutputs.VLLM_GUIDED
    assert built[0].max_steps == 70 and built[0].splits == ("valid_seen", "valid_unseen")
