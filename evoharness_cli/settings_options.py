"""Command-line options derived from a stage's settings model, as TRL's ``TrlParser`` derives its arguments from
its config dataclasses: every typed option (:func:`~evoharness.training.recipes.option_fields`) is declared once, in
the settings model, and appears here with its description; unset, it keeps the recipe's value. A stage without a
recipe section (evaluation, curation) takes its options, with their defaults, from its config model the same way."""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from enum import Enum
from typing import Annotated, Any, Optional, TypeVar, get_args, get_type_hints

import typer
from pydantic import BaseModel

from evoharness.stage_config import nullable
from evoharness.training.recipes import DEFAULT_RECIPE, option_fields, recipe_names

F = TypeVar("F", bound=Callable[..., Any])

RecipeOption = Annotated[str, typer.Option(help=f"Recipe name ({', '.join(recipe_names())}) or path of a recipe "
                                                 "file: every training stage's settings (configs/recipes).")]
SetOption = Annotated[list[str] | None, typer.Option(
    "--set", help="Override one recipe value, as section.field=value (e.g. grpo.learning_rate=1e-4, "
                  "sft.lora.r=16); repeatable. Values are read as YAML.")]
DEFAULT = DEFAULT_RECIPE


def with_settings_options(section: str, model: type[BaseModel]) -> Callable[[F], F]:
    """Add one ``--<field>`` option per typed field of ``model`` to a command; the command receives them as
    ``values={"<section>.<path>": value}`` (only the options given)."""
    fields = option_fields(model)
    panel = f"{section} settings (unset: the recipe's value)"
    options = [(f.name, Annotated[Optional[f.annotation],  # noqa: UP045 - typer needs Optional
                                  typer.Option(help=f.description or None, rich_help_panel=panel)], None)
               for f in fields]
    paths = {f.name: f"{section}.{f.path}" for f in fields}
    return _with_options(options, lambda given: {paths[k]: v for k, v in given.items() if v is not None})


def with_config_options(model: type[BaseModel], exclude: set[str]) -> Callable[[F], F]:
    """Add one ``--<field>`` option per typed field of a stage's config ``model`` (but ``exclude``), with the
    model's default and description (an enum field offers its values); the command receives them all as
    ``values={field: value}``, to build the config from."""
    defaults = {name: field.get_default(call_default_factory=True) for name, field in model.model_fields.items()}
    options = []
    for f in option_fields(model):
        if f.name in exclude:
            continue
        kind = _enum(model, f.name) or f.annotation
        options.append((f.name, Annotated[Optional[kind] if nullable(model, f.name) else kind,  # noqa: UP045 - typer
                                          typer.Option(help=f.description or None)], defaults[f.name]))

    return _with_options(options, dict)


def _enum(model: type[BaseModel], name: str) -> type[Enum] | None:
    annotation = model.model_fields[name].annotation
    return next((a for a in (annotation, *get_args(annotation)) if isinstance(a, type) and issubclass(a, Enum)), None)


def _with_options(options: list[tuple[str, Any, Any]],
                  collect: Callable[[dict[str, Any]], dict[str, Any]]) -> Callable[[F], F]:
    """Add keyword options ``(name, annotation, default)`` to a command, which receives them as
    ``values=collect({name: value})``."""

    def decorate(command: F) -> F:
        signature = inspect.signature(command)
        hints = get_type_hints(command, include_extras=True)  # the command's own annotations, resolved
        own = [p.replace(annotation=hints[p.name]) for p in signature.parameters.values() if p.name != "values"]
        clashes = [name for name, _, _ in options if name in {p.name for p in own}]
        if clashes:
            raise TypeError(f"{command.__name__}: options {clashes} are both the command's and its settings'")
        added = [inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=default, annotation=annotation)
                 for name, annotation, default in options]

        @functools.wraps(command)
        def wrapper(**kwargs: Any) -> Any:
            values = collect({name: kwargs.pop(name) for name, _, _ in options})
            return command(**kwargs, values=values)

        parameters = [p.replace(kind=inspect.Parameter.KEYWORD_ONLY) for p in own] + added
        wrapper.__signature__ = signature.replace(parameters=parameters)  # type: ignore[attr-defined]
        wrapper.__annotations__ = {p.name: p.annotation for p in parameters}
        return wrapper  # type: ignore[return-value]

    return decorate
