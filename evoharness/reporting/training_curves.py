"""Per-step curves of a GRPO run from its ``rollout_history``: success, harness calls per episode (the
harness-annealing curve), the mean of every reward term and the KL to the reference, as one PNG; and one
configuration's seeds side by side."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from evoharness.reporting.charts import panels_chart_png

EPISODE_CURVES = {"success": "episode/success", "harness calls / episode": "episode/harness_calls",
                  "turns / episode": "episode/turns", "repeats / episode": "episode/repeats"}
SUCCESS_CURVES = {"success": "episode/success", "policy's own episodes": "episode/success_unguided",
                  "guided episodes": "episode/success_guided"}
"""Success of every episode, and of the unguided and guided ones apart when some episodes decode without repeats."""
KL_PANEL = "KL to the reference (log)"
"""TRL's per-token KL estimate to the starting model: it peaked at 4.5 and 5.0 in the GRPO runs that lost held-out
games, at 0.04-0.36 in the three that won more of them."""


def _points(history: Sequence[Mapping[str, Any]], key: str) -> list[tuple[float, float]]:
    return [(float(h["step"]), float(h[key])) for h in history if key in h and h[key] is not None]


def reward_term_keys(history: Sequence[Mapping[str, Any]]) -> list[str]:
    """The logged reward terms (``rewards/<term>/mean``), in first-seen order."""
    return list(dict.fromkeys(k for h in history for k in h if k.startswith("rewards/") and k.endswith("/mean")))


def grpo_curves_png(model_version: str, history: Sequence[Mapping[str, Any]]) -> bytes:
    """Success, harness calls and turns per episode, each reward term's mean and the KL, by optimizer step."""
    panels = {
        "success": {name: _points(history, key) for name, key in SUCCESS_CURVES.items()},
        "per episode": {name: _points(history, key) for name, key in EPISODE_CURVES.items() if name != "success"},
        "reward terms (mean)": {k.removeprefix("rewards/").removesuffix("/mean"): _points(history, k)
                                for k in reward_term_keys(history)},
        KL_PANEL: {"kl": _points(history, "kl")},
    }
    return panels_chart_png(panels, f"{model_version}: GRPO by step", "optimizer step", log_panels={KL_PANEL})


SEED_PANELS = {"success of the policy's own episodes": ("episode/success_unguided", "episode/success"),
               KL_PANEL: ("kl",), "harness calls / episode": ("episode/harness_calls",),
               "repeats / episode": ("episode/repeats",)}
"""The panels of one configuration's seeds side by side; where a panel names two keys, the first logged one is
drawn (unguided success where some episodes were guided, else every episode's)."""


def seed_points(history: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """What :func:`grpo_seeds_png` draws of one run's history: each step's number and :data:`SEED_PANELS`' keys (a
    results file keeps these, so a configuration's chart can be drawn again without the warehouse)."""
    keys = {"step", *(key for keys in SEED_PANELS.values() for key in keys)}
    return [{k: v for k, v in h.items() if k in keys} for h in history]


def grpo_seeds_png(configuration: str, histories: Mapping[int, Sequence[Mapping[str, Any]]],
                   unrecorded: Sequence[int] = ()) -> bytes:
    """One GRPO configuration, every seed a line: training success, KL, harness calls and repeats per step; the
    title names the seeds whose history was not recorded (``unrecorded``)."""
    panels: dict[str, dict[str, list[tuple[float, float]]]] = {}
    for panel, keys in SEED_PANELS.items():
        panels[panel] = {}
        for seed, history in sorted(histories.items()):
            key = next((k for k in keys if any(k in h for h in history)), keys[-1])
            panels[panel][f"seed {seed}"] = _points(history, key)
    missing = f" (no history recorded for seed {', '.join(map(str, sorted(unrecorded)))})" if unrecorded else ""
    return panels_chart_png(panels, f"{configuration}: GRPO by step, every seed{missing}", "optimizer step",
                            log_panels={KL_PANEL})


def grpo_curve_table(history: Sequence[Mapping[str, Any]]) -> tuple[list[str], list[list[Any]]]:
    """The same curves as a table: one row per logged step (columns absent from the history are left out)."""
    keys = ["reward", *dict.fromkeys([*EPISODE_CURVES.values(), *SUCCESS_CURVES.values()]), *reward_term_keys(history),
            "kl"]
    keys = [k for k in keys if any(k in h for h in history)]
    rows = [[int(h["step"]), *(None if h.get(k) is None else round(float(h[k]), 4) for k in keys)]
            for h in history if any(k in h for k in keys)]
    return ["step", *keys], rows


def peak_kl(history: Sequence[Mapping[str, Any]]) -> float | None:
    """The largest logged KL to the reference (None: no step logged one, e.g. with β = 0)."""
    return max((float(h["kl"]) for h in history if h.get("kl") is not None), default=None)
