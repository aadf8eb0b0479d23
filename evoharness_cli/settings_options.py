"""Command-line options derived from a stage's settings model, as TRL's ``TrlParser`` derives its arguments from
its config dataclasses: every typed option (:func:`~evoharness.training.recipes.option_fields`) is declared once, in
the settings model, and appears here with its description; unset, it keeps the recipe's value."""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from typing import Annotated, Any, Optional, TypeVar, get_type_hints

import typer
from pydantic import BaseModel

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

    def decorate(command: F) -> F:
        signature = inspect.signature(command)
        hints = get_type_hints(command, include_extras=True)  # the command's own annotations, resolved
        own = [p.replace(annotation=hints[p.name]) for p in signature.parameters.values() if p.name != "values"]
        taken = {p.name for p in own}
        clashes = [f.name for f in fields if f.name in taken]
        if clashes:
            raise TypeError(f"{command.__name__}: options {clashes} are both the command's and {section}'s")
        added = [inspect.Parameter(f.name, inspect.Parameter.KEYWORD_ONLY, default=None,
                                   annotation=Annotated[Optional[f.annotation],  # noqa: UP045 - typer needs it
                                                        typer.Option(help=f.description or None,
                                                                     rich_help_panel=panel)])
                 for f in fields]

        @functools.wraps(command)
        def wrapper(**kwargs: Any) -> Any:
            values = {f"{section}.{f.path}": kwargs.pop(f.name) for f in fields}
            return command(**kwargs, values={k: v for k, v in values.items() if v is not None})

        parameters = [p.replace(kind=inspect.Parameter.KEYWORD_ONLY) for p in own] + added
        wrapper.__signature__ = signature.replace(parameters=parameters)  # type: ignore[attr-defined]
        wrapper.__annotations__ = {p.name: p.annotation for p in parameters}
        return wrapper  # type: ignore[return-value]

    return decorate
