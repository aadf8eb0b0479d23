"""Configuration of a curated SFT dataset."""

from __future__ import annotations

from pydantic import BaseModel, Field


class CurationConfig(BaseModel):
    """What goes into a dataset and how it is split."""

    name: str | None = Field(default=None, description="Dataset name (None: sft-<teacher>).")
    teacher: str = Field(default="expert", description="Teacher whose consolidated episodes are curated.")
    consolidator: str = Field(default="rule", description="Whose examples: rule or llm.")
    require_success: bool = Field(default=True, description="Keep won episodes only.")
    min_belief_precision: float = Field(default=0.99, ge=0, le=1, description=(
        "An episode whose Belief precision is below this is dropped (a metric not computed drops nothing)."))
    min_belief_recall: float = Field(default=0.99, ge=0, le=1, description="The same for Belief recall.")
    min_progress_validity: float = Field(default=0.99, ge=0, le=1, description="The same for Progress validity.")
    min_parse_validity: float = Field(default=1.0, ge=0, le=1, description="The same for parse validity.")
    near_duplicate_jaccard: float = Field(default=0.9, description="Command-bigram Jaccard at or above: duplicate.")
    balance_factor: float = Field(default=1.5, description=(
        "Cap per task type: factor × the train episodes of the type the teacher played least (won or not)."))
    max_per_task_type: int | None = Field(default=None, description="Explicit cap (overrides balance_factor).")
    max_tokens: int = Field(default=4096, ge=1, description="Examples longer than this (prompt + target) are "
                            "dropped.")
    tokenizer: str | None = Field(default=None, description="HF tokenizer path; None: bytes/4 estimate.")
    validation_fraction: float = Field(default=0.1, ge=0, lt=1, description="Share of games held out, by game.")
    output_dir: str | None = Field(default=None, description="Where datasets are saved (None: <warehouse "
                                   "folder>/datasets).")

    @property
    def dataset_name(self) -> str:
        """The name dataset versions are numbered under: ``name``, else ``sft-<teacher>``."""
        return self.name or f"sft-{self.teacher}"
