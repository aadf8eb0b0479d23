"""One config per stage: the command line, the Dagster run config and the library's config class declare the
same defaults (the library's class is the declaration; the other two read it). Evaluation and curation derive their
options and fields, descriptions included, from it; collection and consolidation read its defaults."""

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
    """The stages whose options and fields are still declared beside the library's (their defaults read from it);
    the derived ones are checked by test_derived_options_are_the_config_fields_with_their_descriptions."""
    from assets.consolidation import ConsolidationRunConfig
    from assets.episodes import CollectionRunConfig
    from evoharness.collection import CollectionConfig
    from evoharness.consolidation.config import ConsolidationConfig, LLMSettings
    from evoharness_cli.cli import collect_command
    from evoharness_cli.cli_data import consolidate_command

    return [
        ("collection", _library(CollectionConfig), collect_command, CollectionRunConfig),
        ("consolidation", _library(ConsolidationConfig, {"llm": LLMSettings}), consolidate_command,
         ConsolidationRunConfig),
    ]


@pytest.mark.parametrize("stage", ["collection", "consolidation"])
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


def _derived_stages() -> list[tuple[type, Callable[..., Any], type, set[str], set[str]]]:
    """Stages whose CLI options and Dagster fields are derived from the library's config: (config, command, run
    config, fields only the library has, fields the CLI has but Dagster not)."""
    from assets.curation import CurationRunConfig
    from assets.evaluation import EvaluationRunConfig
    from evoharness.curation.config import CurationConfig
    from evoharness.evaluation.run import EvaluationConfig
    from evoharness_cli.cli_data import curate_command
    from evoharness_cli.cli_evaluation import evaluate_command

    return [  # workers: the collection's default; data_root: $ALFWORLD_DATA or the resource
        (EvaluationConfig, evaluate_command, EvaluationRunConfig, {"workers", "data_root"},
         {"model_version", "checkpoint"}),  # the partition; a checkpoint plays from the CLI only
        (CurationConfig, curate_command, CurationRunConfig, set(), {"teacher"}),  # the partition
    ]


@pytest.mark.parametrize("index", range(2))
def test_derived_options_are_the_config_fields_with_their_descriptions(index: int) -> None:
    """The CLI's and Dagster's fields of a stage are its library config's, each with its type's nullability, default
    and description: written once, in the library."""
    from typing import get_args

    from evoharness.training.recipes import option_fields

    config, command, run_config, library_only, not_in_dagster = _derived_stages()[index]
    library = {f.name: f.description for f in option_fields(config)}
    cli = inspect.signature(command).parameters
    help_texts = {name: get_args(cli[name].annotation)[1].help for name in library if name in cli}
    assert set(library) - set(help_texts) == library_only
    assert help_texts == {name: library[name] for name in help_texts} and all(help_texts.values())
    optional = [name for name in help_texts if not config.model_fields[name].is_required()]
    assert {name: cli[name].default for name in optional} == \
        {name: config.model_fields[name].get_default() for name in optional}
    dagster = run_config.model_fields
    assert set(library) - set(dagster) == library_only | not_in_dagster
    assert {name: dagster[name].description for name in library if name in dagster} == \
        {name: library[name] for name in library if name in dagster}
    nullable = {name for name in dagster if type(None) in get_args(dagster[name].annotation)}
    assert nullable == {name for name in dagster if type(None) in get_args(config.model_fields[name].annotation)}


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
