"""Preset files (``configs/presets/*.yaml``): SFT and GRPO settings for a student base, validated."""

from __future__ import annotations

from pathlib import Path

import yaml

from evoharness.training.grpo import GRPOSettings
from evoharness.training.sft import SFTSettings

PRESETS = Path(__file__).resolve().parents[2] / "configs" / "presets"


def load_preset(name_or_path: str | Path) -> tuple[SFTSettings, GRPOSettings]:
    """A preset by name (``qwen3-8b``) or path; unknown keys are errors (pydantic validation)."""
    path = Path(name_or_path)
    if not path.suffix:
        path = PRESETS / f"{name_or_path}.yaml"
    data = yaml.safe_load(path.read_text())
    unknown = set(data) - {"sft", "grpo"}
    if unknown:
        raise ValueError(f"{path}: unknown sections {sorted(unknown)} (expected sft, grpo)")
    for section, model in (("sft", SFTSettings), ("grpo", GRPOSettings)):
        extra = set(data.get(section, {})) - set(model.model_fields)
        if extra:
            raise ValueError(f"{path}: unknown {section} settings {sorted(extra)}")
    return SFTSettings.model_validate(data.get("sft", {})), GRPOSettings.model_validate(data.get("grpo", {}))
