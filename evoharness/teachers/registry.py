"""The teacher registry: ``teachers.yaml`` (versioned with the code) mirrored into the warehouse table.

An entry names the provider, model, endpoint, the *name* of the environment variable holding the key
(never the key), prices, concurrency, sampling, mode and prompt template. ``expert`` is always present.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterable, Iterator
from datetime import UTC, datetime
from enum import StrEnum
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from evoharness.harness.prompts import Mode
from evoharness.teachers.clients.structured import StructuredOutputs
from evoharness.teachers.retry import RetryConfig
from warehouse import Warehouse, load_query

REGISTRY_VERSION = 1
DEFAULT_REGISTRY_PATH = Path(__file__).resolve().parents[2] / "teachers.yaml"
ENV_VAR_RE = r"^[A-Z_][A-Z0-9_]*$"
NAME_RE = r"^[a-z0-9][a-z0-9_.\-]{0,63}$"


LATER_OPTIONAL_FIELDS = ("bank_version", "structured_outputs")
"""Entry fields added after entries were written; unset, they leave an entry's hash as it was."""

DEFAULT_DISTILL_GAMES: int | None = None
"""Train games per distillation run: every train game (the 750 outside ``dev``), the data the ``small`` recipe was
measured on (benchmarks/results/recipes.json). The paper's teacher played 500; a spend cap bounds an API teacher."""


class Provider(StrEnum):
    ANTHROPIC = "anthropic"
    OPENAI = "openai"
    OPENAI_COMPATIBLE = "openai_compatible"
    LOCAL_HF = "local_hf"
    EXPERT = "expert"


class RegistryError(ValueError):
    """The registry file cannot be read; the message names the file and the field."""


def _fields(exc: ValidationError) -> str:
    """Field and rule of each error, never the offending value (it might be a pasted key)."""
    return "; ".join(f"{'.'.join(str(p) for p in err['loc']) or 'entry'}: {err['msg']}" for err in exc.errors())


class MissingCredentialsError(ValueError):
    """The teacher's key variable is unset; the message names the variable, never a value."""


class TeacherSpec(BaseModel):
    """One registered teacher. Prices are USD per million tokens (None: unknown, cost not computed)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(pattern=NAME_RE, description="Registry name = Dagster partition key = episodes.teacher.")
    provider: Provider
    model: str | None = Field(default=None, description="Provider model id, or a local model folder (local_hf).")
    base_url: str | None = Field(default=None, description="API endpoint (required for openai_compatible).")
    api_key_env: str | None = Field(default=None, pattern=ENV_VAR_RE, description="Env var holding the key.")
    price_in: float | None = Field(default=None, ge=0, description="USD per million input tokens.")
    price_out: float | None = Field(default=None, ge=0, description="USD per million output tokens.")
    max_concurrency: int = Field(default=8, ge=1, description="Episodes (= calls) in flight at most.")
    temperature: float | None = Field(default=None, ge=0, le=2, description="None: the provider's default.")
    max_tokens: int = Field(default=512, ge=1, description="Completion tokens per turn.")
    mode: Mode = Field(default=Mode.BPE, description="Default interface: bpe or react.")
    prompt_template: str = Field(default="alfworld/{mode}", description="Prompt set id; {mode} is filled in.")
    constrain_actions: bool = Field(default=False, description=(
        "Decode each action constrained to the admissible commands and meta-actions: local_hf in this process, "
        "openai_compatible through the server's structured outputs (structured_outputs)."))
    structured_outputs: StructuredOutputs | None = Field(default=None, description=(
        "openai_compatible with constrain_actions: how the server takes the turn grammar: vllm (vLLM >= 0.10.2), "
        "vllm-guided (older vLLM) or sglang."))
    avoid_repeats: bool = Field(default=False, description=(
        "With constrain_actions: also leave out the environment commands this episode already issued in the same "
        "state, its observation and admissible commands (while another one is admissible)."))
    retry: RetryConfig = Field(default_factory=RetryConfig)
    distill_games: int | None = Field(default=DEFAULT_DISTILL_GAMES, ge=1, description=(
        "Train games a distillation run (sensor → distill_teacher job) collects on; None: every train game."))
    max_spend_usd: float | None = Field(default=None, ge=0, description=(
        "USD this teacher may spend in all, over its attempt ledger (failed attempts included); None: no cap."))
    auto_distill: bool = Field(default=False, description=(
        "The sensor turns this teacher into a distillation run by itself (after a passing preflight)."))
    bank_version: int | None = Field(default=None, ge=1, description=(
        "bpe mode: the Experience bank version its episodes recall from (a served student: the one it trained "
        "with, which `evoharness serve` prints); None: the seed bank."))

    @field_validator("base_url")
    @classmethod
    def _url(cls, value: str | None) -> str | None:
        if value is not None and not value.startswith(("http://", "https://")):
            raise ValueError("base_url must start with http:// or https://")
        return value.rstrip("/") if value else value

    @model_validator(mode="after")
    def _provider_fields(self) -> TeacherSpec:
        if self.provider is not Provider.EXPERT and not self.model:
            raise ValueError(f"provider {self.provider.value} needs --model")
        if self.provider is Provider.OPENAI_COMPATIBLE and not self.base_url:
            raise ValueError("provider openai_compatible needs --base-url")
        if self.provider in (Provider.ANTHROPIC, Provider.OPENAI) and not self.api_key_env:
            raise ValueError(f"provider {self.provider.value} needs --api-key-env (the variable's name)")
        if self.constrain_actions and self.provider is not Provider.LOCAL_HF and not (
                self.provider is Provider.OPENAI_COMPATIBLE and self.structured_outputs is not None):
            raise ValueError("constrain_actions needs a local model (local_hf) or an openai_compatible server with "
                             "structured outputs (--structured-outputs vllm, vllm-guided or sglang)")
        if self.structured_outputs is not None and (self.provider is not Provider.OPENAI_COMPATIBLE
                                                    or not self.constrain_actions):
            raise ValueError("structured_outputs carries the action constraint to an openai_compatible server: it "
                             "needs that provider and constrain_actions")
        if self.avoid_repeats and not self.constrain_actions:
            raise ValueError("avoid_repeats works through constrained decoding: it needs constrain_actions")
        return self

    def prompt_id(self, mode: Mode) -> str:
        return self.prompt_template.format(mode=mode.value)

    def cost_usd(self, input_tokens: int | None, output_tokens: int | None) -> float | None:
        """Cost of one call; None when a price or a token count is unknown."""
        if self.price_in is None or self.price_out is None or input_tokens is None or output_tokens is None:
            return None
        return (input_tokens * self.price_in + output_tokens * self.price_out) / 1_000_000

    def api_key(self) -> str | None:
        """The key from ``api_key_env``; :class:`MissingCredentialsError` if the variable is named but unset."""
        if not self.api_key_env:
            return None
        value = os.environ.get(self.api_key_env)
        if not value:
            raise MissingCredentialsError(
                f"Teacher {self.name!r} reads its API key from ${self.api_key_env}, which is not set."
            )
        return value

    @property
    def sha256(self) -> str:
        """The entry's content hash; a field added later and left unset is left out (entries from before it keep
        their hash, the sensor's run key)."""
        data = self.model_dump(mode="json")
        for name in LATER_OPTIONAL_FIELDS:
            if data[name] is None:
                del data[name]
        payload = json.dumps(data, sort_keys=True)
        return hashlib.sha256(payload.encode()).hexdigest()

    def warehouse_row(self) -> dict[str, Any]:
        """The ``teachers`` table row (the key variable's name only)."""
        data = self.model_dump(mode="json")
        retry = data.pop("retry")
        return data | {"retry": json.dumps(retry, sort_keys=True), "spec_sha256": self.sha256,
                       "updated_at": datetime.now(UTC).replace(tzinfo=None)}


EXPERT = TeacherSpec(name="expert", provider=Provider.EXPERT, max_concurrency=64)


REGISTRY_HEADER = """\
# Teacher registry, versioned with the code. Edit with `evoharness teacher add NAME ...`. Keys are never
# stored here: `api_key_env` is the NAME of the environment variable that holds a teacher's key.
# Examples (prices are USD per million tokens; check your provider's current price list):
#   evoharness teacher add claude --provider anthropic --model <model id> --api-key-env ANTHROPIC_API_KEY \\
#       --price-in <usd> --price-out <usd> --max-concurrency 16 --max-spend-usd 50
#   evoharness teacher add gpt --provider openai --model <model id> --api-key-env OPENAI_API_KEY
#   evoharness teacher add qwen-vllm --provider openai_compatible --model Qwen/Qwen3-8B \\
#       --base-url http://gpu-host:8000/v1 --price-in 0 --price-out 0
# Nothing runs by itself unless a teacher is added with --auto-distill (the sensor then preflights it and
# starts its distillation run, within its --max-spend-usd).
"""


class RegistryFile(BaseModel):
    model_config = ConfigDict(extra="forbid")

    version: int = REGISTRY_VERSION
    teachers: list[TeacherSpec] = Field(default_factory=list)


def registry_path() -> Path:
    """``$EVOHARNESS_TEACHERS``, else ``teachers.yaml`` at the repository root."""
    return Path(os.environ.get("EVOHARNESS_TEACHERS") or DEFAULT_REGISTRY_PATH)


class TeacherRegistry:
    """The teachers of one registry file, by name, ``expert`` included."""

    def __init__(self, teachers: list[TeacherSpec], path: Path | None = None) -> None:
        self.path = path
        self._by_name: dict[str, TeacherSpec] = {EXPERT.name: EXPERT}
        for spec in teachers:
            self._by_name[spec.name] = spec

    @classmethod
    def load(cls, path: str | os.PathLike | None = None) -> TeacherRegistry:
        file = Path(path) if path is not None else registry_path()
        if not file.exists():
            return cls([], file)
        try:
            raw = yaml.safe_load(file.read_text()) or {}
            parsed = RegistryFile.model_validate(raw)
        except (yaml.YAMLError, ValidationError, OSError) as exc:
            detail = (_fields(exc) if isinstance(exc, ValidationError) else str(exc).splitlines()[0])
            raise RegistryError(f"teacher registry {file} is unusable ({detail}). Fix the file, or point "
                                "$EVOHARNESS_TEACHERS / --registry at a good one.") from None
        if parsed.version != REGISTRY_VERSION:
            raise RegistryError(f"{file}: registry version {parsed.version}, expected {REGISTRY_VERSION}")
        return cls(parsed.teachers, file)

    def save(self, path: str | os.PathLike | None = None) -> Path:
        file = Path(path) if path is not None else (self.path or registry_path())
        data = RegistryFile(teachers=list(self)).model_dump(mode="json", exclude_defaults=False)
        header = REGISTRY_HEADER
        tmp = file.with_suffix(file.suffix + ".tmp")
        tmp.write_text(header + yaml.safe_dump(data, sort_keys=False))
        tmp.replace(file)
        self.path = file
        return file

    def add(self, spec: TeacherSpec) -> bool:
        """Add or replace ``spec``; returns True when the entry is new or changed."""
        changed = self._by_name.get(spec.name) != spec
        self._by_name[spec.name] = spec
        return changed

    def get(self, name: str) -> TeacherSpec:
        try:
            return self._by_name[name]
        except KeyError:
            raise KeyError(f"Unknown teacher {name!r}; registered: {', '.join(self.names())}.") from None

    def names(self) -> list[str]:
        return list(self._by_name)

    def __contains__(self, name: object) -> bool:
        return name in self._by_name

    def __iter__(self) -> Iterator[TeacherSpec]:
        return iter(self._by_name.values())


def upsert_warehouse(warehouse: Warehouse, specs: Iterable[TeacherSpec]) -> int:
    """Mirror registry entries into the ``teachers`` table (one transaction); returns rows written."""
    sql = load_query("teacher_upsert")
    rows = [spec.warehouse_row() for spec in specs]
    with warehouse.transaction() as con:
        for row in rows:
            con.execute(sql, row)
    return len(rows)


def reconcile_warehouse(warehouse: Warehouse, registry: TeacherRegistry, prune: bool = True) -> list[str]:
    """Derive the ``teachers`` table from the registry (the truth): upsert every entry and, with ``prune``,
    mark rows whose entry left the registry ``in_registry = false`` (kept: episodes name them). Returns the
    names so marked."""
    upsert_warehouse(warehouse, registry)
    if not prune:
        return []
    names = registry.names()
    stale = [row[0] for row in warehouse.query("teachers_left_registry", names=names)[1]]
    if stale:
        warehouse.execute("teachers_mark_unregistered", names=stale)
    return stale
