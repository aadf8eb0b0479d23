"""A GRPO curriculum: the train games a policy lost. A game the student wins every time gives its GRPO group no
advantage to learn from (all its episodes score alike). For a student that wins most train games greedily, the games
it lost are where sampled episodes differ; a weak student may lose them with every sample too (watch the groups'
``reward_std`` in the run's history)."""

from __future__ import annotations

from evoharness.training.grpo import GRPOSettings
from warehouse import Warehouse


def lost_train_games(wh: Warehouse, policy: str, max_steps: int) -> list[str]:
    """The train games ``policy`` played to the end at ``max_steps`` and never won (by game id)."""
    _, rows = wh.query("lost_train_games", policy=policy, max_steps=max_steps)
    if not rows:
        raise LookupError(f"the warehouse holds no train game that {policy!r} played at {max_steps} steps and lost: "
                          f"play it on train games first (evoharness evaluate --model-version <version> --split train "
                          f"--limit 300 --max-steps {max_steps})")
    return [game for (game,) in rows]


def with_curriculum(wh: Warehouse, settings: GRPOSettings, policy: str) -> GRPOSettings:
    """``settings`` drawing only the train games ``policy`` lost at the settings' episode budget (recorded as
    ``games`` and ``games_from``, so the model version names them); they replace ``games_limit``."""
    games = lost_train_games(wh, policy, settings.episode_steps)
    return GRPOSettings.model_validate(settings.model_dump() | {"games": games, "games_from": policy,
                                                                "games_limit": None})
