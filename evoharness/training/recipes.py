"""Training recipes: versioned files (``configs/recipes/<name>.yaml``) that name every training stage's settings.

A recipe has one section per stage — ``sft`` (:class:`SFTSettings`), ``dagger`` (:class:`SFTSettings` of a DAgger
round, or null for none), ``curriculum`` (:class:`CurriculumSettings`, or null for none), ``grpo``
(:class:`GRPOSettings`) and ``relabel`` (:class:`RelabelSettings`, how a student plays while the expert labels) —
and each section validates as that stage's settings model, the one declaration of its fields, types, defaults and
descriptions.
A value a section leaves out takes the model's default; ``bf16: auto`` means bf16 where the machine has bf16 units
(:func:`bf16_is_fast`). Single values are overridden as ``section.field=value`` (``grpo.learning_rate=1e-4``,
``sft.lora.r=16``; values are read as YAML). The recipe's name, the sha256 of its file and the overrides are
recorded on every model version it trains (:meth:`Recipe.stamp`). Importing this module imports no torch.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from types import NoneType, UnionType
from typing import Any, Literal, Union, get_args, get_origin

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from evoharness.errors import EvoharnessError
from evoharness.training.grpo_config import GRPOSettings
from evoharness.training.hardware import bf16_is_fast
from evoharness.training.relabel import RelabelSettings
from evoharness.training.sft_config import SFTSettings

RECIPES = Path(__file__).resolve().parents[2] / "configs" / "recipes"
DEFAULT_RECIPE = "small"
"""The recipe a deployment trains with unless told otherwise: the one measured to make a student that plays on a
CPU machine (docs/results.md, students)."""


class RecipeError(EvoharnessError, ValueError):
    """A recipe that cannot be used: a missing file, an unknown key, a wrong type. The message is one line."""


class CurriculumSettings(BaseModel):
    """The SFT student's greedy play on train games before GRPO: GRPO then draws only the games it lost."""

    model_config = ConfigDict(extra="forbid")

    limit: int = Field(default=200, ge=1, description="First N train games the SFT student plays (dev games are "
                       "never train games).")
    processes: int | None = Field(default=None, ge=1, description="Processes that share the games (one core "
                                  "each); None: as evaluation chooses (EvaluationConfig.processes).")


SECTIONS: dict[str, type[BaseModel]] = {"sft": SFTSettings, "dagger": SFTSettings, "curriculum": CurriculumSettings,
                                        "grpo": GRPOSettings, "relabel": RelabelSettings}
AUTO_BF16 = ("sft", "dagger", "grpo")
"""Sections whose ``bf16`` may be ``auto``."""


class Recipe(BaseModel):
    """Every training stage's settings, from one recipe file and its overrides."""

    name: str
    sha256: str = Field(description="sha256 of the recipe file's bytes.")
    overrides: tuple[str, ...] = Field(default=(), description="The overrides applied, as section.field=value.")
    sft: SFTSettings
    dagger: SFTSettings | None = Field(default=None, description=(
        "One DAgger round after SFT: the SFT student plays train games as ``relabel`` says, the expert labels the "
        "states it reaches, and SFT goes on from the student's weights on the relabelled dataset with the fields "
        "set here over the parent's settings (fields left out keep the parent's); None: no round."))
    curriculum: CurriculumSettings | None = None
    grpo: GRPOSettings
    relabel: RelabelSettings = Field(default_factory=RelabelSettings)

    def given(self, section: str) -> dict[str, Any]:
        """The top-level fields of ``section`` that the overrides set, with their values (a training that goes on
        from a parent version keeps the parent's settings but these)."""
        names = {item.split("=", 1)[0].split(".")[1] for item in self.overrides if item.startswith(f"{section}.")}
        return {name: getattr(getattr(self, section), name) for name in sorted(names)}

    def dagger_given(self) -> dict[str, Any]:
        """The fields the ``dagger`` section sets (file or overrides), with their values: they override the SFT
        parent's settings in the DAgger round."""
        if self.dagger is None:
            raise RecipeError(f"recipe {self.name} has no dagger section (set one, e.g. --set dagger.max_steps=1500)")
        return {name: getattr(self.dagger, name) for name in sorted(self.dagger.model_fields_set)}

    def stamp(self) -> dict[str, Any]:
        """What a model version records of the recipe that trained it."""
        return {"recipe": self.name, "recipe_sha256": self.sha256, "recipe_overrides": list(self.overrides)}


def variant_overrides(overrides: Sequence[str]) -> list[str]:
    """The overrides that make a version a variant of its recipe: every one but a seed (seeds are replicates of the
    recipe as shipped)."""
    return [item for item in overrides if not item.split("=", 1)[0].endswith(".seed")]


def recipe_names() -> list[str]:
    """The recipes shipped in ``configs/recipes``."""
    return sorted(p.stem for p in RECIPES.glob("*.yaml"))


def recipe_path(name_or_path: str | Path) -> Path:
    """A recipe by name (``small``) or by path (``my/recipe.yaml``)."""
    text = str(name_or_path)
    path = Path(text) if text.endswith((".yaml", ".yml")) or "/" in text else RECIPES / f"{text}.yaml"
    if not path.is_file():
        raise RecipeError(f"recipe {text!r} not found ({path}); shipped recipes: {', '.join(recipe_names())}, "
                          "or pass the path of a .yaml file")
    return path


def load_recipe(name_or_path: str | Path = DEFAULT_RECIPE, overrides: Sequence[str] = (),
                values: Mapping[str, Any] | None = None) -> Recipe:
    """The recipe ``name_or_path`` with ``overrides`` (``["grpo.learning_rate=1e-4"]``, values read as YAML) and
    then typed ``values`` (``{"grpo.learning_rate": 1e-4}``; None leaves the recipe's value) applied."""
    path = recipe_path(name_or_path)
    raw = path.read_bytes()
    try:
        data = yaml.safe_load(raw) or {}
    except yaml.YAMLError as exc:
        raise RecipeError(f"recipe {path}: not valid YAML ({str(exc).splitlines()[0]})") from None
    if not isinstance(data, dict):
        raise RecipeError(f"recipe {path}: expected sections {', '.join(SECTIONS)}, found {type(data).__name__}")
    unknown = sorted(set(data) - set(SECTIONS))
    if unknown:
        raise RecipeError(f"recipe {path}: unknown section {unknown[0]!r} (sections: {', '.join(SECTIONS)})")
    for section, model in SECTIONS.items():
        if isinstance(data.get(section), dict):
            _check_keys(data[section], model, section, path)
    pairs = _override_pairs(overrides) + [(k, v) for k, v in (values or {}).items() if v is not None]
    for key, value in pairs:
        _apply(data, key, value, path)
    for section in AUTO_BF16:
        if isinstance(data.get(section), dict) and data[section].get("bf16") == "auto":
            data[section]["bf16"] = bf16_is_fast()
    for section in ("sft", "grpo"):
        data.setdefault(section, {})
    try:
        return Recipe.model_validate(data | {"name": path.stem, "sha256": hashlib.sha256(raw).hexdigest(),
                                             "overrides": tuple(f"{k}={_text(v)}" for k, v in pairs)})
    except ValidationError as exc:
        error = exc.errors()[0]
        where = ".".join(str(part) for part in error["loc"])
        raise RecipeError(f"recipe {path.stem}: {where}: {error['msg']} (got {error.get('input')!r})") from None


def _check_keys(node: dict[str, Any], model: type[BaseModel], where: str, path: Path) -> None:
    """Refuse a key the settings model does not have (pydantic would drop it silently)."""
    for key, value in node.items():
        if key not in model.model_fields:
            raise RecipeError(f"recipe {path}: {where} has no field {key!r} (fields: {', '.join(model.model_fields)})")
        nested = _nested_model(model.model_fields[key].annotation)
        if nested is not None and isinstance(value, dict):
            _check_keys(value, nested, f"{where}.{key}", path)


def _override_pairs(overrides: Sequence[str]) -> list[tuple[str, Any]]:
    pairs = []
    for item in overrides:
        key, sep, text = item.partition("=")
        if not sep or not key.strip():
            raise RecipeError(f"override {item!r} is not section.field=value (e.g. grpo.learning_rate=1e-4)")
        try:
            pairs.append((key.strip(), yaml.safe_load(text)))
        except yaml.YAMLError:
            raise RecipeError(f"override {item!r}: the value is not valid YAML") from None
    return pairs


def _text(value: Any) -> str:
    return value if isinstance(value, str) else yaml.safe_dump(value, default_flow_style=True).strip().removesuffix(
        "\n...").strip()


def _apply(data: dict[str, Any], key: str, value: Any, path: Path) -> None:
    """Set ``key`` (section.field[.field]) in the raw recipe, refusing a key the settings models do not have."""
    parts = key.split(".")
    section, fields = parts[0], parts[1:]
    if section not in SECTIONS or not fields:
        raise RecipeError(f"override {key!r}: expected section.field with section one of {', '.join(SECTIONS)}")
    model: type[BaseModel] | None = SECTIONS[section]
    node = data.setdefault(section, {})
    if node is None:  # e.g. curriculum: null, then an override turns it on
        node = data[section] = {}
    for depth, name in enumerate(fields):
        if model is None or name not in model.model_fields:
            known = ", ".join(model.model_fields) if model is not None else "none"
            raise RecipeError(f"override {key!r}: {'.'.join(parts[:depth + 1])} has no field {name!r} "
                              f"(fields: {known})")
        if depth == len(fields) - 1:
            node[name] = value
            return
        model = _nested_model(model.model_fields[name].annotation)
        child = node.get(name)
        if not isinstance(child, dict):
            child = node[name] = {}
        node = child


def _nested_model(annotation: Any) -> type[BaseModel] | None:
    """The settings model inside ``annotation`` (``LoraSettings | None`` → ``LoraSettings``), if any."""
    candidates = [annotation, *get_args(annotation)]
    return next((c for c in candidates if isinstance(c, type) and issubclass(c, BaseModel)), None)



@dataclass(frozen=True)
class OptionField:
    """A settings field that the command line and Dagster offer as a typed option: ``name`` is the option
    (``learning_rate``, ``call_cost``), ``path`` the field within the section (``reward.call_cost``)."""

    name: str
    path: str
    annotation: type
    description: str


def option_fields(model: type[BaseModel]) -> list[OptionField]:
    """The scalar fields of ``model``, and of the settings models it always holds (``reward``), as typed options;
    lists and optional nested models (``games``, ``lora``) are set through overrides."""
    found = []
    for name, field in model.model_fields.items():
        scalar = _scalar(field.annotation)
        nested = _nested_model(field.annotation)
        if scalar is not None:
            found.append(OptionField(name, name, scalar, field.description or ""))
        elif nested is not None and NoneType not in get_args(field.annotation):
            found += [OptionField(sub, f"{name}.{sub}", sub_scalar, subfield.description or "")
                      for sub, subfield in nested.model_fields.items()
                      if (sub_scalar := _scalar(subfield.annotation)) is not None and sub not in model.model_fields]
    return found


def _scalar(annotation: Any) -> type | None:
    """int, float, str or bool for a field of that type (optional or not; a Literal or Enum of strings is str)."""
    if get_origin(annotation) in (Union, UnionType):
        rest = [a for a in get_args(annotation) if a is not NoneType]
        return _scalar(rest[0]) if len(rest) == 1 else None
    if get_origin(annotation) is Literal:
        kinds = {type(a) for a in get_args(annotation)}
        return kinds.pop() if len(kinds) == 1 and kinds <= {str, int} else None
    if isinstance(annotation, type) and issubclass(annotation, Enum):
        return str
    return annotation if annotation in (int, float, str, bool) else None
