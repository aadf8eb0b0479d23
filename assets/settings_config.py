"""Dagster run config derived from a stage's settings model (the one declaration of every training field): each
typed field (:func:`~evoharness.training.recipes.option_fields`) is an optional config field with the model's
description; unset, it keeps the recipe's value. ``recipe`` picks the recipe (unset: the ``students`` resource's),
``overrides`` sets any value as ``section.field=value``, as ``--set`` does on the command line. A stage without a
recipe section (evaluation, curation) takes its fields, with their defaults, from its config model the same way
(:func:`with_config_fields`)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Optional, TypeVar

import dagster as dg
from pydantic import BaseModel, Field, create_model

from evoharness.stage_config import defaults, nullable
from evoharness.training.recipes import Recipe, load_recipe, option_fields


class RecipeRunConfig(dg.Config):
    """What every training asset's run config has: the recipe and overrides of single values."""

    recipe: str | None = Field(default=None, description="Recipe name or path (configs/recipes); None: the "
                               "students resource's recipe.")
    overrides: list[str] = Field(default=[], description="Recipe values to override, as section.field=value "
                                 "(e.g. grpo.learning_rate=1e-4), as `--set` on the command line.")

    def load(self, default_recipe: str) -> Recipe:
        """The recipe with the overrides and then every typed field that is set."""
        return load_recipe(self.recipe or default_recipe, self.overrides, self.values())

    def values(self) -> dict[str, Any]:  # the typed fields of the derived class, by override key
        return {}


def settings_run_config(name: str, section: str, model: type[BaseModel],
                        base: type[RecipeRunConfig] = RecipeRunConfig) -> type[RecipeRunConfig]:
    """A run config class ``name``: ``base`` (the asset's own fields, declared as a class so type checkers see
    them) with one optional field per typed field of ``model`` (``section`` of the recipe)."""
    fields = option_fields(model)
    declared: dict[str, Any] = {f.name: (Optional[f.annotation],  # noqa: UP045 - Dagster config needs Optional
                                         Field(default=None, description=f.description or None)) for f in fields}
    paths = {f.name: f"{section}.{f.path}" for f in fields}

    def values(self: RecipeRunConfig) -> dict[str, Any]:
        return {path: getattr(self, field) for field, path in paths.items() if getattr(self, field) is not None}

    derived = create_model(name, __base__=base, __doc__=f"{base.__doc__ or ''} Unset {section} fields keep the "
                           "recipe's values.", **declared)
    derived.values = values  # type: ignore[method-assign]
    return derived


C = TypeVar("C", bound=RecipeRunConfig)


def with_settings_fields(section: str, model: type[BaseModel]) -> Callable[[type[C]], type[C]]:
    """Class decorator: the asset's run config class (its own fields declared on it) with the typed fields of
    ``model`` added (:func:`settings_run_config`), under the same name."""

    def decorate(cls: type[C]) -> type[C]:
        return settings_run_config(cls.__name__, section, model, cls)  # type: ignore[return-value]

    return decorate


K = TypeVar("K", bound=dg.Config)


def with_config_fields(model: type[BaseModel], exclude: set[str]) -> Callable[[type[K]], type[K]]:
    """Class decorator: the asset's run config class (its own fields declared on it) with one field per typed field
    of a stage's config ``model`` (but ``exclude``), with the model's default and description, under the same name.
    An enum field is a string of its values (Dagster's enum config would take the members' names); the model
    validates it when the asset builds its config from :meth:`dg.Config.model_dump`."""
    values = defaults(model)

    def decorate(cls: type[K]) -> type[K]:
        declared: dict[str, Any] = {
            f.name: (Optional[f.annotation] if nullable(model, f.name) else f.annotation,  # noqa: UP045 - Dagster
                     Field(default=values[f.name], description=f.description or None))  # config needs Optional
            for f in option_fields(model) if f.name not in exclude}
        return create_model(cls.__name__, __base__=cls, __doc__=cls.__doc__, **declared)  # type: ignore[call-overload,no-any-return]

    return decorate
