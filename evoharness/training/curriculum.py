"""A GRPO curriculum: the train games a policy lost. A game the student wins every time gives its GRPO group no
advantage to learn from (all its episodes score alike). For a student that wins most train games greedily, the games
it lost are where sampled episodes differ; a weak student may lose them with every sample too (watch the groups'
``reward_std`` in the run's history). A recipe's ``curriculum`` section has the SFT student play its first ``limit``
train games greedily at GRPO's episode budget (:func:`play_curriculum`); GRPO then draws the games it lost."""

from __future__ import annotations

from collections.abc import Callable

from evoharness.agents.records import EpisodeRecord
from evoharness.envs.alfworld.catalog import GameCatalog
from evoharness.errors import MissingInputError
from evoharness.evaluation.run import EvaluationConfig, EvaluationResult, evaluate
from evoharness.training.grpo_config import GRPOSettings
from evoharness.training.recipes import CurriculumSettings
from warehouse import Warehouse


def lost_train_games(wh: Warehouse, policy: str, max_steps: int, data_root: str | None = None,
                     limit: int | None = None) -> list[str]:
    """The train games ``policy`` played to the end at ``max_steps`` and never won (by game id), among the catalog's
    first ``limit`` train games (None: every train game it played); games that are no longer train games (the
    ``dev`` split is carved from train) are left out."""
    _, rows = wh.query("lost_train_games", policy=policy, max_steps=max_steps)
    train = {g.game_id for g in GameCatalog(data_root).games("train", limit)}
    lost = [game for (game,) in rows if game in train]
    if not lost:
        among = "" if limit is None else f" among the first {limit}"
        raise MissingInputError(f"the warehouse holds no train game{among} that {policy!r} played at {max_steps} steps and "
                                f"lost: play it on train games first (evoharness evaluate --model-version <version> "
                                f"--split train --limit {limit or 200} --max-steps {max_steps})")
    return lost


def with_curriculum(wh: Warehouse, settings: GRPOSettings, policy: str, data_root: str | None = None,
                    limit: int | None = None) -> GRPOSettings:
    """``settings`` drawing only the train games ``policy`` lost at the settings' episode budget among the first
    ``limit`` (a recipe's ``curriculum.limit``; None: all it played), recorded as ``games`` and ``games_from`` so
    the model version names them; they replace ``games_limit``. The limit matters once the policy has played more
    train games than the curriculum (a larger curriculum's screen)."""
    games = lost_train_games(wh, policy, settings.episode_steps, data_root, limit)
    return GRPOSettings.model_validate(settings.model_dump() | {"games": games, "games_from": policy,
                                                                "games_limit": None})


def curriculum_evaluation(model_version: str, curriculum: CurriculumSettings, grpo: GRPOSettings,
                          data_root: str | None = None) -> EvaluationConfig:
    """The parent's greedy play that makes the curriculum: its first ``curriculum.limit`` train games at GRPO's
    episode budget."""
    return EvaluationConfig(model_version=model_version, splits=("train",), limit=curriculum.limit,
                            max_steps=grpo.episode_steps, processes=curriculum.processes, data_root=data_root)


def play_curriculum(wh: Warehouse, model_version: str, curriculum: CurriculumSettings, grpo: GRPOSettings,
                    run_id: str, data_root: str | None = None,
                    on_progress: Callable[[str, int, int, EpisodeRecord], None] | None = None) -> EvaluationResult:
    """Play the curriculum games (resumable: finished episodes are kept, so a second call plays nothing)."""
    return evaluate(wh, curriculum_evaluation(model_version, curriculum, grpo, data_root), run_id,
                    on_progress=on_progress)
