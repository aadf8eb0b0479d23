"""The cost-aware reward: every term against hand-computed values, the annealing, TRL's view of the terms."""

from __future__ import annotations

import math
from datetime import UTC, datetime

import pytest

from evoharness.agents.records import EpisodeRecord, EpisodeSpec, StepRecord
from evoharness.agents.rows import episode_row, step_rows
from evoharness.harness.prompts import Mode
from evoharness.training.reward import (
    RewardConfig,
    TrajectoryStats,
    diversity_weight,
    reward_functions,
    trajectory_reward,
)
from warehouse import Warehouse


def _record(catalog, turns: list[tuple[str, str, str]], won: bool, max_steps: int = 70, seed: int = 0
            ) -> EpisodeRecord:
    """``turns``: (kind, action, observation after it)."""
    spec = EpisodeSpec("student", catalog.games("train", limit=1)[0], Mode.BPE, seed=seed, max_steps=max_steps,
                       prompt_id="alfworld/bpe", prompt_sha="x")
    steps = [StepRecord(t=t, kind=kind, action=action, argument=None, think="", raw_output="", parse_error=None,
                        observation=obs, admissible=True, won=won and t == len(turns) - 1,
                        done=won and t == len(turns) - 1, score=0.0, prompt="p", prompt_id="alfworld/bpe",
                        prompt_sha="x", latency_ms=1.0)
             for t, (kind, action, obs) in enumerate(turns)]
    now = datetime.now(UTC)
    return EpisodeRecord(spec=spec, engine="fast", started_at=now, finished_at=now, steps=steps)


TURNS = [
    ("env", "go to countertop 1", "On the countertop 1, you see a mug 1."),
    ("recall", "recall", "skills: ..."),
    ("env", "go to countertop 1", "Nothing happens."),  # same action, different observation before it: no repeat
    ("env", "look", "You are facing the countertop 1."),  # look at "Nothing happens."
    ("env", "look", "You are facing the countertop 1."),  # look at "You are facing ...": first time
    ("env", "look", "You are facing the countertop 1."),  # the same action at the same observation: a repeat
    ("invalid", "", "Invalid action"),
    ("env", "take mug 1 from countertop 1", "You pick up the mug 1 from the countertop 1."),
    ("commit", "commit", "ok"),
]


OSCILLATION = [
    ("env", "go to shelf 5", "On the shelf 5, you see nothing."),
    ("env", "go to shelf 6", "On the shelf 6, you see nothing."),
    ("env", "go to shelf 5", "On the shelf 5, you see nothing."),
    ("track", "track shelf 6", "shelf 6: visited, nothing seen."),
    ("env", "go to shelf 6", "On the shelf 6, you see nothing."),  # at shelf 5 again: a repeat
    ("track", "track shelf 5", "shelf 5: visited, nothing seen."),
    ("env", "go to shelf 5", "On the shelf 5, you see nothing."),  # at shelf 6 again: a repeat
    ("track", "track shelf 6", "shelf 6: visited, nothing seen."),  # same call at shelf 5 again: a repeat
]


def test_trajectory_stats(catalog) -> None:
    stats = TrajectoryStats.from_record(_record(catalog, TURNS, won=True))
    assert stats == TrajectoryStats(won=True, turns=9, max_steps=70, distinct_verbs=5, repeats=1, invalid=1,
                                    harness_calls=2)


def test_a_meta_action_between_two_visits_does_not_make_the_second_round_new(catalog) -> None:
    stats = TrajectoryStats.from_record(_record(catalog, OSCILLATION, won=False))
    assert stats.repeats == 3 and stats.harness_calls == 3


def test_the_warehouse_counts_repeats_as_the_reward_does(catalog, tmp_path) -> None:
    """The ``episode_repeats`` view (what evaluation reports) and the reward's repeat count are one definition."""
    records = [_record(catalog, TURNS, won=True, seed=0), _record(catalog, OSCILLATION, won=False, seed=1),
               _record(catalog, [], won=False, seed=2)]
    with Warehouse(tmp_path / "w.duckdb") as wh:
        for record in records:
            wh.write_episode(episode_row(record, "run", "v"), step_rows(record))
        counted = dict(wh.con.execute("SELECT episode_id, repeats FROM episode_repeats").fetchall())
    assert counted == {r.spec.episode_id: TrajectoryStats.from_record(r).repeats for r in records}
    assert sorted(counted.values()) == [0, 1, 3]


def test_every_term_of_the_reward(catalog) -> None:
    stats = TrajectoryStats.from_record(_record(catalog, TURNS, won=True))
    terms = trajectory_reward(stats, RewardConfig(call_cost=0.05), epoch=0.0)
    assert terms["solved_reward"] == 10.0
    assert terms["efficiency_reward"] == pytest.approx(1 - 9 / 70)
    assert terms["diversity_reward"] == pytest.approx(0.5 * 5 / 9)  # λ_div(0) = λ_max
    assert terms["repeat_penalty"] == pytest.approx(-0.1)
    assert terms["invalid_penalty"] == pytest.approx(-0.1)
    assert terms["harness_call_cost"] == pytest.approx(-0.1)
    assert terms["total"] == pytest.approx(10 + (1 - 9 / 70) + 0.5 * 5 / 9 - 0.3)

    lost = trajectory_reward(TrajectoryStats.from_record(_record(catalog, TURNS, won=False)), RewardConfig())
    assert lost["solved_reward"] == lost["efficiency_reward"] == 0.0 and lost["harness_call_cost"] == 0.0
    capped = TrajectoryStats(won=False, turns=30, max_steps=70, distinct_verbs=1, repeats=25, invalid=0,
                             harness_calls=0)
    assert trajectory_reward(capped, RewardConfig())["repeat_penalty"] == pytest.approx(-1.0)  # min(repeats, 10)
    assert trajectory_reward(stats, RewardConfig(t_max=9))["efficiency_reward"] == 0.0


def test_diversity_bonus_anneals_to_zero() -> None:
    config = RewardConfig(diversity_max=1.0, diversity_epochs=150)
    assert diversity_weight(0, config) == pytest.approx(1.0)
    assert diversity_weight(75, config) == pytest.approx(0.5)
    assert diversity_weight(150, config) == pytest.approx(0.0, abs=1e-12)
    assert diversity_weight(400, config) == pytest.approx(0.0, abs=1e-12)
    assert diversity_weight(30, config) == pytest.approx(0.5 * (1 + math.cos(math.pi * 30 / 150)))


def test_terms_are_trl_reward_functions_named_after_the_term(catalog) -> None:
    from trl.trainer.utils import get_callable_name

    functions = reward_functions(RewardConfig())
    names = [get_callable_name(f) for f in functions]
    assert names == ["solved_reward", "efficiency_reward", "diversity_reward", "repeat_penalty", "invalid_penalty",
                     "harness_call_cost", "progress_reward"]
    stats = TrajectoryStats.from_record(_record(catalog, TURNS, won=True)).as_dict()
    state = type("State", (), {"epoch": 150.0})()
    values = [f(prompts=["g"], completions=["c"], trajectory=[stats], trainer_state=state)[0] for f in functions]
    assert values[2] == pytest.approx(0.0, abs=1e-12)  # annealed away at U epochs
    assert sum(values) == pytest.approx(trajectory_reward(TrajectoryStats(**stats), RewardConfig(), 150.0)["total"])


def test_the_harness_call_cost_can_be_annealed_in_over_the_first_steps() -> None:
    stats = TrajectoryStats(won=True, turns=20, max_steps=70, distinct_verbs=4, repeats=0, invalid=0,
                            harness_calls=4)
    ramped = RewardConfig(call_cost=0.1, call_cost_ramp_steps=10)
    costs = [trajectory_reward(stats, ramped, step=step)["harness_call_cost"] for step in (0, 5, 10, 20)]
    assert costs == pytest.approx([0.0, -0.2, -0.4, -0.4])
    assert trajectory_reward(stats, RewardConfig(call_cost=0.1), step=0)["harness_call_cost"] == pytest.approx(-0.4)
    state = type("State", (), {"epoch": 0.0, "global_step": 5})()  # TRL passes its trainer state
    (cost,) = reward_functions(ramped)[5](trajectory=[stats.as_dict()], trainer_state=state)
    assert cost == pytest.approx(-0.2)


def test_progress_rewards_how_far_towards_its_goal_a_lost_episode_got(catalog) -> None:
    lost = _record(catalog, TURNS, won=False)  # saw the mug and took it, never put it on the shelf
    lost.objective = "put some mug on shelf."
    stats = TrajectoryStats.from_record(lost, with_progress=True)
    assert stats.progress == pytest.approx(2 / 3)  # of: never seen, seen not taken, not placed, every step done
    won = _record(catalog, TURNS, won=True)
    won.objective = lost.objective
    assert TrajectoryStats.from_record(won, with_progress=True).progress == 1.0
    weighted = RewardConfig(progress_weight=3.0)
    assert trajectory_reward(stats, weighted)["progress_reward"] == pytest.approx(2.0)
    assert trajectory_reward(stats, RewardConfig())["progress_reward"] == 0.0  # the paper's reward
    unmeasured = TrajectoryStats.from_record(lost)
    assert unmeasured.progress is None and trajectory_reward(unmeasured, RewardConfig())["progress_reward"] == 0.0
    with pytest.raises(ValueError, match="needs each episode's goal progress"):
        trajectory_reward(unmeasured, weighted)
    with pytest.raises(ValueError, match="has no objective to measure its progress against"):
        TrajectoryStats.from_record(_record(catalog, TURNS, won=False), with_progress=True)
