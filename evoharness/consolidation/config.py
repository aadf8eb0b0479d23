"""Configuration of consolidation runs and of the quality gates that guard curation."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field


class LLMSettings(BaseModel):
    """The chat model behind the LLM consolidator: a registered teacher (its model, endpoint, key, price)."""

    teacher: str = Field(default="consolidator", description="Registry name (teachers.yaml) of the model.")
    max_attempts: int = Field(default=3, ge=1, description="Calls per episode before it is recorded as failed.")
    max_tokens: int = 2048
    temperature: float = 0.0


class ConsolidationConfig(BaseModel):
    """Which stored episodes to consolidate, how, and how much in parallel."""

    teacher: str = "expert"
    consolidator: Literal["rule", "llm"] = "rule"
    splits: tuple[str, ...] = ("train",)
    modes: tuple[str, ...] = ("bpe", "react")
    limit: int | None = Field(default=None, description="The first N source episodes in game order, consolidated "
                              "or not (a rerun plans the same ones; None: all).")
    engine: str | None = Field(default=None, description="Replay engine (None: the library default).")
    workers: int | None = Field(default=None, ge=0, description="Replay worker processes (0: in-process; "
                                "None: by engine, in-process for the fast one).")
    concurrency: int = Field(default=4, ge=1, description="Episodes in flight (replay + consolidator calls).")
    batch_size: int = Field(default=25, ge=1, description="Episodes per batch, cut in game order; the bank is "
                            "frozen within one and evolves after it.")
    reconsolidate: bool = Field(default=False, description="Redo episodes this consolidator already did.")
    bank_id: str = "alfworld-seed"
    bank_version: int | None = Field(default=None, description="Pin a frozen bank version (None: latest).")
    evolve_bank: bool = Field(default=True, description="Propose a new bank version after each batch.")
    history_length: int = 10
    data_root: str | None = Field(default=None, description="ALFWorld data folder (None: $ALFWORLD_DATA).")
    llm: LLMSettings = Field(default_factory=LLMSettings)


class QualityThresholds(BaseModel):
    """Blocking gates: curation does not run while a consolidator's audit is below these."""

    belief_precision: float = 0.99
    belief_recall: float = 0.99
    progress_validity: float = 0.99
    parse_validity: float = 1.0
    episode_coverage: float = 0.9
