"""One typed config per stage: the library's config class is the single declaration of every parameter's
default. The command line and Dagster ``Config`` classes read their defaults from here
(``tests/test_stage_configs.py`` checks that all three agree, stage by stage)."""

from __future__ import annotations

import dataclasses
from enum import Enum
from types import NoneType
from typing import Any, get_args

from pydantic import BaseModel


def defaults(config_class: type) -> dict[str, Any]:
    """Field → default of a config dataclass or pydantic model (enums as their values, tuples as lists)."""
    if dataclasses.is_dataclass(config_class):
        values = {f.name: f.default for f in dataclasses.fields(config_class)
                  if f.default is not dataclasses.MISSING}
    elif issubclass(config_class, BaseModel):
        values = {name: field.get_default(call_default_factory=True)
                  for name, field in config_class.model_fields.items() if not field.is_required()}
    else:
        raise TypeError(f"{config_class!r} is neither a dataclass nor a pydantic model")
    return {name: _plain(value) for name, value in values.items()}


def _plain(value: Any) -> Any:
    if isinstance(value, Enum):
        return value.value
    if isinstance(value, tuple):
        return list(value)
    return value


def description(config_class: type[BaseModel], name: str) -> str:
    """A pydantic config field's description, for the help text of the option or Dagster field that sets it."""
    return config_class.model_fields[name].description or ""


def nullable(config_class: type[BaseModel], name: str) -> bool:
    """Whether a pydantic config field takes None (``int | None``), so a derived option or Dagster field does too."""
    return NoneType in get_args(config_class.model_fields[name].annotation)
