"""GRPO on TRL with multi-turn rollouts in the environment: per-turn samples, group advantages, model versions,
the Dagster asset."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import dagster as dg
import pytest
import torch

from evoharness.agents.records import EpisodeRecord, EpisodeSpec
from evoharness.collection import CollectionConfig, collect
from evoharness.harness.prompts import Mode
from evoharness.training.grpo_samples import (
    deal_by_tokens,
    episode_loss_tokens,
    episode_turns,
    episode_weighted,
    group_advantages,
    interleaved,
    longest_first,
    trimmed_chunks,
    turn_samples,
    whole_sequences,
)
from evoharness.training.model_versions import (
    teacher_datasets,
    version_id,
)
from evoharness.training.rollout import Rollout, TurnTokens
from evoharness.training.student_card import CARD_FILE
from tests.conftest import (
    recipe_settings,
    tiny_grpo_settings,
    tiny_sft_settings,
    train_grpo_version,
    train_sft_version,
)
from warehouse import Warehouse

QUICK = tiny_grpo_settings(games_limit=2, games_per_step=1, num_generations=2, max_steps=2, episode_steps=3,
                                  max_new_tokens=12)


def test_group_advantages() -> None:
    rewards = torch.tensor([10.0, 0.0, 1.0, 1.0])  # two games, a group of two each
    advantages = group_advantages(rewards, group=2)
    assert advantages[0] == pytest.approx(5 / (7.0711 + 1e-4), rel=1e-3) and advantages[0] == -advantages[1]
    assert advantages[2:].tolist() == [0.0, 0.0]  # equal rewards carry no signal
    assert group_advantages(rewards, group=2, scale="none").tolist() == [5.0, -5.0, 0.0, 0.0]


def test_batch_scaling_keeps_a_failed_groups_small_differences_small() -> None:
    # game 1: a win and a loss; game 2: two losses that differ by one repeat (0.1)
    rewards = torch.tensor([10.5, 0.0, 0.1, 0.0])
    by_group, by_batch = group_advantages(rewards, group=2), group_advantages(rewards, group=2, scale="batch")
    assert by_group[2].item() == pytest.approx(by_group[0].item(), rel=1e-2)  # the repeat weighs as much as the win
    assert by_batch[0] > 1.0 and 0 < by_batch[2] < by_batch[0] / 50  # the win dominates the step


def test_recipes_grpo_sections() -> None:
    paper = recipe_settings("qwen3-8b", "grpo", lora={"r": 16, "alpha": 32},
                            reward={"call_cost": 0.05})
    assert (paper.games_per_step, paper.num_generations, paper.learning_rate, paper.beta) == (16, 8, 1e-6, 0.01)
    assert (paper.episode_steps, paper.max_new_tokens, paper.epochs) == (70, 512, 150)
    assert paper.lora is not None and (paper.lora.r, paper.lora.alpha) == (16, 32)
    assert paper.reward.call_cost == 0.05 and paper.reward.diversity_max == 0.5
    small = recipe_settings("small", "grpo")
    assert small.episode_steps == CollectionConfig.max_steps  # the budget in every SFT prompt ("Step k/70")
    assert not small.forced_tokens_in_loss and not paper.forced_tokens_in_loss
    assert small.episode_level_loss and not paper.episode_level_loss  # token-weighted lost the 1-epoch student games
    assert not recipe_settings("small", "grpo", episode_level_loss=False).episode_level_loss
    tiny = recipe_settings("tiny", "grpo", max_steps=3)
    assert (tiny.games_per_step, tiny.num_generations, tiny.games_limit, tiny.max_steps, tiny.lora) == (2, 4, 32, 3,
                                                                                                         None)


def test_every_turn_is_a_sample_with_its_trajectory_advantage(catalog) -> None:
    game = catalog.games("train", limit=1)[0]
    record = EpisodeRecord(EpisodeSpec("s", game, Mode.BPE, 0, 3, "p", "x"), "fast", datetime.now(UTC))
    played = [Rollout(record, [TurnTokens([1, 2, 3], [7, 8]), TurnTokens([1, 2], [9])]),
              Rollout(record, [TurnTokens([4], [])])]
    samples = turn_samples(episode_turns(played, torch.tensor([0.5, -0.5])), pad_id=0)
    assert samples["prompt_ids"].tolist() == [[1, 2, 3], [0, 1, 2], [0, 0, 4]]  # left-padded prompts
    assert samples["completion_ids"].tolist() == [[7, 8], [9, 0], [0, 0]]  # right-padded completions
    assert samples["completion_mask"].tolist() == [[1, 1], [1, 0], [0, 0]]  # an empty completion trains nothing
    assert samples["advantages"].tolist() == [0.5, 0.5, -0.5]
    assert int(samples["num_items_in_batch"]) == 3


def test_each_process_plays_a_share_of_every_group_and_trains_about_the_same_tokens() -> None:
    """Two processes, a step of 2 groups of 4: each plays two episodes of each group (not one process the first
    game's group and the other the second's), and the turns are dealt so each trains about the same tokens; every
    turn is trained exactly once."""
    assert interleaved(8, 2, 0) == [0, 2, 4, 6] and interleaved(8, 2, 1) == [1, 3, 5, 7]
    assert interleaved(8, 1, 0) == list(range(8))
    lengths = [900, 880, 700, 300, 290, 120, 110, 100, 90, 50]
    shares = deal_by_tokens(lengths, 2)
    assert sorted(i for share in shares for i in share) == list(range(len(lengths)))
    loads = [sum(lengths[i] for i in share) for share in shares]
    assert max(loads) / (sum(lengths) / 2) < 1.02  # as against 1.73 for the first five turns against the rest
    assert deal_by_tokens([5, 5, 5], 2) == [[0, 2], [1]]  # ties go to the lower process, in index order
    assert deal_by_tokens([], 2) == [[], []]


def test_samples_train_longest_first_in_chunks_without_unused_padding(catalog) -> None:
    game = catalog.games("train", limit=1)[0]
    record = EpisodeRecord(EpisodeSpec("s", game, Mode.BPE, 0, 3, "p", "x"), "fast", datetime.now(UTC))
    played = [Rollout(record, [TurnTokens([1], [7]), TurnTokens([1, 2, 3, 4], [8, 9])]),
              Rollout(record, [TurnTokens([5, 6], [9]), TurnTokens([1, 2, 3], [7, 8, 9])])]
    ordered = longest_first(turn_samples(episode_turns(played, torch.tensor([1.0, -1.0])), pad_id=0))
    assert ordered["prompt_ids"].tolist() == [[1, 2, 3, 4], [0, 1, 2, 3], [0, 0, 5, 6], [0, 0, 0, 1]]
    assert ordered["advantages"].tolist() == [1.0, -1.0, -1.0, 1.0]  # each turn keeps its trajectory's advantage
    assert int(ordered["num_items_in_batch"]) == 7
    chunks = trimmed_chunks(ordered, 2)
    assert [rows for rows, _ in chunks] == [slice(0, 2), slice(2, 4)]
    short = chunks[1][1]
    assert short["prompt_ids"].tolist() == [[5, 6], [0, 1]] and short["completion_ids"].tolist() == [[9], [7]]


def test_log_probs_in_trimmed_chunks_match_the_padded_batch(tiny_grpo, tmp_path: Path) -> None:
    """The old and reference log-probabilities, computed chunk by chunk without the chunk's unused padding, are
    the padded batch's (numerics only)."""
    from evoharness.training.grpo import build_grpo_trainer

    model_dir, fixed, _ = tiny_grpo
    trainer = build_grpo_trainer(str(model_dir), tmp_path, tiny_grpo_settings(
        games_limit=2, games_per_step=2, num_generations=2, max_steps=1, per_device_train_batch_size=3,
        save_steps=None), fixed)
    played = list(fixed.episodes.values())
    batch = longest_first(turn_samples(episode_turns(played, torch.ones(len(played))),
                                       trainer.processing_class.pad_token_id))
    assert batch["prompt_ids"].size(0) > 3  # several chunks
    with torch.no_grad():
        chunked = trainer._chunked_logps(batch, reference=True)
        padded = trainer._get_per_token_logps_and_entropies(
            trainer.ref_model, *whole_sequences(batch), batch["completion_ids"].size(1), batch_size=3)[0]
    mask = batch["completion_mask"].bool()
    assert torch.allclose(chunked[mask], padded[mask], atol=1e-4)


def test_eager_attention_scores_the_turns_as_sdpa_does(tiny_grpo, tmp_path: Path) -> None:
    """The attention kernel is how, not what: policy and reference load with the one chosen, and the padded turns'
    log-probabilities under eager attention are SDPA's (numerics only)."""
    from evoharness.training.grpo import build_grpo_trainer

    model_dir, fixed, _ = tiny_grpo
    logps = {}
    for kernel in ("sdpa", "eager"):
        trainer = build_grpo_trainer(str(model_dir), tmp_path / kernel, tiny_grpo_settings(
            games_limit=2, games_per_step=2, num_generations=2, max_steps=1, per_device_train_batch_size=3,
            save_steps=None, attention=kernel), fixed)
        assert trainer.model.config._attn_implementation == trainer.ref_model.config._attn_implementation == kernel
        played = list(fixed.episodes.values())
        batch = longest_first(turn_samples(episode_turns(played, torch.ones(len(played))),
                                           trainer.processing_class.pad_token_id))
        with torch.no_grad():
            logps[kernel] = trainer._chunked_logps(batch, reference=True)[batch["completion_mask"].bool()]
    assert torch.allclose(logps["eager"], logps["sdpa"], atol=1e-4)


def test_forced_tokens_are_attended_to_but_not_scored(catalog) -> None:
    game = catalog.games("train", limit=1)[0]
    record = EpisodeRecord(EpisodeSpec("s", game, Mode.BPE, 0, 3, "p", "x"), "fast", datetime.now(UTC))
    played = [Rollout(record, [TurnTokens([1], [7, 8, 2], [True, False, False]), TurnTokens([1], [9])])]
    scored = turn_samples(episode_turns(played, torch.tensor([1.0])), pad_id=0, choices_only=True)
    assert scored["completion_mask"].tolist() == [[1, 1, 1], [1, 0, 0]]  # every real token stays in the context
    assert scored["tool_mask"].tolist() == [[1, 0, 0], [1, 0, 0]]  # unconstrained turn: all its tokens scored
    assert int(scored["num_items_in_batch"]) == 2
    every = turn_samples(episode_turns(played, torch.tensor([1.0])), pad_id=0)  # forced_tokens_in_loss: before 12-02
    assert "tool_mask" not in every and int(every["num_items_in_batch"]) == 4


def test_episode_level_loss_weighs_a_long_loss_as_much_as_a_short_win(catalog) -> None:
    """A group of a 1-turn win and a 4-turn loss: token-level, the loss's tokens outweigh the win's 4 : 1 (net
    push-down); episode-level, each episode's tokens carry one episode's weight and the group's weights cancel."""
    game = catalog.games("train", limit=1)[0]
    record = EpisodeRecord(EpisodeSpec("s", game, Mode.BPE, 0, 3, "p", "x"), "fast", datetime.now(UTC))
    won = Rollout(record, [TurnTokens([1], [7, 8])])
    lost = Rollout(record, [TurnTokens([1], [7, 8, 2], [True, True, False]) for _ in range(4)])
    assert [episode_loss_tokens(r) for r in (won, lost)] == [2, 12]
    tokens = torch.tensor([float(episode_loss_tokens(r, choices_only=True)) for r in (won, lost)])
    assert tokens.tolist() == [2.0, 8.0]  # forced tokens are not scored
    advantages = torch.tensor([1.0, -1.0])

    def net_weight(a: torch.Tensor) -> float:  # Σ over scored tokens of their advantage, as the loss sums them
        samples = turn_samples(episode_turns([won, lost], a), pad_id=0, choices_only=True)
        mask = samples["completion_mask"] * samples.get("tool_mask", samples["completion_mask"])
        return float((samples["advantages"].unsqueeze(1) * mask).sum())

    assert net_weight(advantages) == pytest.approx(2 - 8)  # token-level: the loss dominates
    balanced = episode_weighted(advantages, tokens, float(tokens.mean()))
    assert balanced.tolist() == pytest.approx([5 / 2, -5 / 8])
    assert net_weight(balanced) == pytest.approx(0.0)
    assert episode_weighted(torch.tensor([1.0]), torch.tensor([0.0]), 5.0).tolist() == [0.0]  # nothing scored
    with pytest.raises(ValueError, match="normalized over tokens"):
        tiny_grpo_settings(episode_level_loss=True, loss_type="grpo")  # per-turn means: another weighting


@pytest.mark.parametrize("avoid_repeats", [False, True])
def test_rollouts_avoiding_repeats_never_repeat_a_command_in_a_state(tmp_path: Path,
                                                                            avoid_repeats: bool) -> None:
    """A near-greedy untrained model loops in its rollouts; with avoid_repeats it never issues a command twice in one
    state (replayed)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from evoharness.testing.replay import state_repeats
    from evoharness.testing.tiny_hf import build_tiny_qwen3
    from evoharness.training.grpo import rollout_engine, training_games
    from evoharness.training.reward import TrajectoryStats

    path = build_tiny_qwen3(tmp_path / "m")
    settings = tiny_grpo_settings(episode_steps=10, max_new_tokens=256, temperature=1e-3,
                                         avoid_repeats=avoid_repeats)
    engine = rollout_engine(settings, None, None, None)
    try:
        [played] = engine.play(training_games(settings)[:1], AutoModelForCausalLM.from_pretrained(path),
                               AutoTokenizer.from_pretrained(path), round_id=0)
    finally:
        engine.close()
    stats = TrajectoryStats.from_record(played.record)
    assert stats.turns == 10 and len(played.turns) == 10
    record = played.record
    in_state = state_repeats(record.spec.game, record.spec.seed, [(s.kind, s.action) for s in record.steps])
    assert (in_state == 0) if avoid_repeats else (in_state > 0 and stats.repeats >= in_state)
    if avoid_repeats:  # a vLLM server samples unconstrained: it cannot leave commands out
        with pytest.raises(ValueError, match="constrained decoding"):
            tiny_grpo_settings(avoid_repeats=True, vllm_server_url="http://127.0.0.1:8000")


@pytest.mark.parametrize(("bf16", "bf16_rollouts", "expected"), [(True, True, "bfloat16"), (True, False, None),
                                                               (False, True, None)])
def test_rollouts_decode_in_bf16_only_where_the_training_passes_run_in_it(bf16: bool, bf16_rollouts: bool,
                                                                         expected: str | None) -> None:
    from evoharness.training.grpo import rollout_engine

    settings = tiny_grpo_settings(bf16=bf16, bf16_rollouts=bf16_rollouts)
    engine = rollout_engine(settings, None, None, None)
    engine.close()
    assert engine.compute_dtype == expected
    with pytest.raises(ValueError, match="bf16_rollouts"):
        tiny_grpo_settings(bf16_rollouts=True, vllm_server_url="http://127.0.0.1:8000")


def test_guided_episodes_are_the_first_of_each_group_and_only_they_avoid_repeats(tmp_path: Path) -> None:
    """With ``guided_per_group`` 1 of groups of 2, the first episode of each group (by its position in the step's
    global batch, so a second process's share is guided alike) decodes without repeats and the second loops as the
    near-greedy untrained model does."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from evoharness.testing.replay import state_repeats
    from evoharness.testing.tiny_hf import build_tiny_qwen3
    from evoharness.training.grpo import rollout_engine, training_games

    path = build_tiny_qwen3(tmp_path / "m")
    settings = tiny_grpo_settings(episode_steps=10, max_new_tokens=256, temperature=1e-3, num_generations=2,
                                         guided_per_group=1)
    engine = rollout_engine(settings, None, None, None)
    try:  # positions 2 and 3 of the step: the second group, as another process would play it
        played = engine.play(training_games(settings)[:1] * 2, AutoModelForCausalLM.from_pretrained(path),
                             AutoTokenizer.from_pretrained(path), round_id=0, positions=[2, 3])
    finally:
        engine.close()
    assert [r.guided for r in played] == [True, False]
    in_state = [state_repeats(r.record.spec.game, r.record.spec.seed, [(s.kind, s.action) for s in r.record.steps])
                for r in played]
    assert in_state[0] == 0 and in_state[1] > 0


@pytest.mark.parametrize("settings", [{"guided_per_group": 4}, {"guided_per_group": 1, "avoid_repeats": True},
                                      {"guided_per_group": 1, "vllm_server_url": "http://127.0.0.1:8000"}])
def test_guided_episodes_leave_one_to_the_policy_and_need_constrained_decoding(settings: dict) -> None:
    with pytest.raises(ValueError, match="guided_per_group"):
        tiny_grpo_settings(num_generations=4, **settings)


def test_a_guided_episode_keeps_a_positive_advantage_and_loses_a_negative_one() -> None:
    from evoharness.training.grpo_samples import wins_only_when_guided

    advantages = torch.tensor([1.5, -1.5, 0.5, -0.5])
    guided = torch.tensor([True, True, False, False])
    assert wins_only_when_guided(advantages, guided).tolist() == [1.5, 0.0, 0.5, -0.5]


def test_guided_runs_draw_the_success_of_the_policy_and_the_guided_episodes_apart() -> None:
    from evoharness.reporting.training_curves import grpo_curve_table, grpo_curves_png

    history = [{"step": 1, "reward": 1.0, "episode/success": 0.5, "episode/success_unguided": 0.25,
                "episode/success_guided": 0.75, "kl": 0.0}, {"step": 2, "reward": 2.0, "episode/success": 0.5,
                                                            "kl": 4.49}]
    columns, rows = grpo_curve_table(history)
    assert columns == ["step", "reward", "episode/success", "episode/success_unguided", "episode/success_guided", "kl"]
    assert rows == [[1, 1.0, 0.5, 0.25, 0.75, 0.0], [2, 2.0, 0.5, None, None, 4.49]]
    assert grpo_curves_png("v", history).startswith(b"\x89PNG")
    assert tiny_grpo_settings(num_generations=4, guided_per_group=1).guided(4)
    assert not tiny_grpo_settings(num_generations=4, guided_per_group=1).guided(5)


def test_a_configurations_seeds_are_drawn_side_by_side(monkeypatch: pytest.MonkeyPatch) -> None:
    from evoharness.reporting import training_curves

    drawn: dict = {}
    titles: list[str] = []
    draw = training_curves.panels_chart_png
    monkeypatch.setattr(training_curves, "panels_chart_png", lambda panels, title, *args, **kwargs: drawn.update(
        panels) or titles.append(title) or draw(panels, title, *args, **kwargs))
    histories = {0: [{"step": 1, "episode/success": 0.5, "episode/success_unguided": 0.25, "kl": 0.01,
                      "episode/harness_calls": 6.0, "episode/repeats": 2.0}],
                 1: [{"step": 1, "episode/success": 0.75, "kl": 0.02, "episode/harness_calls": 5.0}]}
    assert training_curves.grpo_seeds_png("small", histories).startswith(b"\x89PNG")
    assert drawn["success of the policy's own episodes"] == {"seed 0": [(1.0, 0.25)], "seed 1": [(1.0, 0.75)]}
    assert drawn["repeats / episode"] == {"seed 0": [(1.0, 2.0)], "seed 1": []}
    training_curves.grpo_seeds_png("small", histories, unrecorded=[2])
    assert "seed 2" in titles[-1] and "seed 2" not in titles[0]


def test_guided_episodes_fade_out_by_the_step_named() -> None:
    fading = tiny_grpo_settings(num_generations=4, guided_per_group=2, guided_until_step=12)
    assert [fading.guided_in_group(step) for step in (0, 5, 6, 11, 12, 30)] == [2, 2, 1, 1, 0, 0]
    assert [fading.guided(position, 6) for position in range(8)] == [True, False, False, False] * 2
    assert not any(fading.guided(position, 12) for position in range(8))
    assert tiny_grpo_settings(num_generations=4, guided_per_group=2).guided_in_group(30) == 2
    with pytest.raises(ValueError, match="set guided_per_group too"):
        tiny_grpo_settings(guided_until_step=12)
    with pytest.raises(ValueError, match="set beta > 0"):
        tiny_grpo_settings(ref_sync_steps=4, beta=0.0)


def test_trl_config_sets_activation_checkpointing_without_the_deprecated_alias(tmp_path: Path) -> None:
    import warnings

    from evoharness.training.grpo import trl_config

    for on in (True, False):
        with warnings.catch_warnings():
            warnings.simplefilter("error", FutureWarning)  # transformers 5 warns on `gradient_checkpointing=`
            config = trl_config(tiny_grpo_settings(gradient_checkpointing=on), tmp_path)
        assert config.activation_checkpointing is on


def test_long_run_levers_reach_trls_config_and_name_new_versions_only_when_on(tmp_path: Path) -> None:
    from evoharness.training.grpo import trl_config
    from evoharness.training.model_versions import version_id
    from evoharness.training.reward import RewardConfig

    base = tiny_grpo_settings(beta=0.01)
    config = trl_config(base.model_copy(update={"ref_sync_steps": 4, "lr_scheduler": "cosine"}), tmp_path)
    assert (config.sync_ref_model, config.ref_model_sync_steps, config.ref_model_mixup_alpha) == (True, 4, 1.0)
    assert config.lr_scheduler_type.value == "cosine"
    default = trl_config(base, tmp_path)
    assert not default.sync_ref_model and default.lr_scheduler_type.value == "linear"
    ids = {name: version_id("expert", "grpo", "parent", settings) for name, settings in {
        "off": base,
        "fade": base.model_copy(update={"guided_per_group": 1, "guided_until_step": 8}),
        "refresh": base.model_copy(update={"ref_sync_steps": 4}),
        "cosine": base.model_copy(update={"lr_scheduler": "cosine"}),
        "ramp": base.model_copy(update={"reward": RewardConfig(call_cost=0.05, call_cost_ramp_steps=6)}),
        "flat": base.model_copy(update={"reward": RewardConfig(call_cost=0.05)}),
        "progress": base.model_copy(update={"reward": RewardConfig(progress_weight=1.0)}),
        "bf16 rollouts": base.model_copy(update={"bf16_rollouts": True}),
    }.items()}
    assert len(set(ids.values())) == len(ids)  # while off, none is in the id: tests/test_recipes.py pins old ids


def test_grpo_version_plays_trains_and_is_reused(curated_db: Path, tmp_path: Path) -> None:
    logs: list[dict[str, float]] = []
    with Warehouse(curated_db) as wh:
        sft = train_sft_version(wh, teacher_datasets(wh, "expert")[0], tiny_sft_settings(max_steps=2, max_length=1024), tmp_path, "s")
        version = train_grpo_version(wh, sft.model_version, QUICK, tmp_path, "g",
                                     on_log=lambda entry, step, _: logs.append(entry))
        again = train_grpo_version(wh, sft.model_version, QUICK, tmp_path, "g2")
    row = version.row
    assert (row["stage"], row["parent_version"], row["steps"], row["train_examples"]) == ("grpo", sft.model_version,
                                                                                          2, 2)
    assert again.reused and again.model_version == version.model_version
    history = row["rollout_history"]
    assert len(history) == 2
    for step in history:
        assert {f"rewards/{t}/mean" for t in ("solved_reward", "efficiency_reward", "diversity_reward",
                                              "repeat_penalty", "invalid_penalty", "harness_call_cost")} <= set(step)
        # one game x 2 episodes x 3 turns (3 steps cannot win a game): 6 turn samples per step
        assert step["episode/turns"] == 3.0 and step["samples/turns"] == 6.0 and step["episode/success"] == 0.0
        assert step["episode/failed"] == 0.0
        total = sum(v for k, v in step.items() if k.startswith("rewards/"))
        assert step["reward"] == pytest.approx(total, abs=1e-5)
    assert any("reward" in entry for entry in logs)
    assert Path(version.path, "config.json").exists() and Path(version.path, CARD_FILE).exists()


def test_dagster_grpo_student_registers_a_model_version(curated_db: Path, tmp_path: Path) -> None:
    import assets.training as at
    from pipelines.partitions import MODEL_VERSION_PARTITIONS_NAME, register_teachers
    from pipelines.resources import AlfworldResource, StudentResource, TrainingLauncher, WarehouseResource

    resources = {"warehouse": WarehouseResource(path=str(curated_db)), "alfworld": AlfworldResource(),
                 "students": StudentResource(recipe="tiny", models_dir=str(tmp_path)),
                 "training": TrainingLauncher(), "pipes_client": dg.PipesSubprocessClient()}
    with Warehouse(curated_db) as wh:  # the expert with a 2-step budget: 2 lost train games, GRPO's curriculum
        collect(CollectionConfig(split="train", limit=2, max_steps=2, workers=0, engine="fast"), wh, run_id="t")
    with dg.instance_for_test() as instance:
        register_teachers(instance)
        result = dg.materialize(
            [at.sft_student, at.grpo_student], instance=instance, partition_key="expert", resources=resources,
            run_config={"ops": {
                "sft_student": {"config": {"max_steps": 2, "max_length": 1024, "dataset_id": "sft-expert@v1"}},
                "grpo_student": {"config": {"curriculum_from": "expert", "games_per_step": 1, "num_generations": 2,
                                            "max_steps": 1, "episode_steps": 2, "max_new_tokens": 8,
                                            "call_cost": 0.05}},
            }})
        assert result.success
        events = {e.asset_key.to_user_string(): e.materialization.metadata
                  for e in result.get_asset_materialization_events()}
        grpo = events["grpo_student"]
        assert grpo["parent_version"].value == events["sft_student"]["model_version"].value
        assert "data:image/png;base64," in grpo["rollout_curves"].value
        table = grpo["rollout_curve_table"].value  # one row per step: success, harness calls, each reward term
        assert "episode/harness_calls" in table and "rewards/harness_call_cost/mean" in table
        assert table.count("\n") == 2  # header, rule, the one step
        checks = {c.check_name: c.passed for c in result.get_asset_check_evaluations()}
        assert checks == {"sft_student_learned": True, "grpo_rollouts_healthy": True,
                          "grpo_stayed_near_parent": True}  # one step: the policy is still its parent
        versions = instance.get_dynamic_partitions(MODEL_VERSION_PARTITIONS_NAME)
        assert set(versions) == {events["sft_student"]["model_version"].value, grpo["model_version"].value}
    with Warehouse(curated_db) as wh:
        settings = json.loads(wh.scalar("SELECT settings FROM model_versions WHERE stage = 'grpo'"))
        lost = wh.con.execute("SELECT game_id FROM episodes WHERE max_steps = 2 ORDER BY game_id").fetchall()
    assert settings["reward"]["call_cost"] == 0.05
    assert settings["games"] == [g for (g,) in lost] and settings["games_from"] == "expert"  # named on the version


def test_every_turn_is_trained_once_per_step_in_bounded_micro_batches(tiny_grpo, tmp_path: Path) -> None:
    """Fixed rollouts of 2 games × 2 episodes per step: every turn sample goes through exactly one training
    forward per step, no forward holds more than per_device_train_batch_size sequences, and the parameters move."""
    from collections import Counter

    from evoharness.training.grpo import build_grpo_trainer

    model_dir, fixed, _ = tiny_grpo
    settings = tiny_grpo_settings(games_limit=2, games_per_step=2, num_generations=2, max_steps=2,
                                         per_device_train_batch_size=5, save_steps=None)
    trainer = build_grpo_trainer(str(model_dir), tmp_path, settings, fixed)
    trained: Counter[tuple[int, ...]] = Counter()
    sizes: list[tuple[bool, int]] = []

    def count(module, args, kwargs) -> None:  # type: ignore[no-untyped-def]
        ids, mask = kwargs["input_ids"], kwargs["attention_mask"]
        sizes.append((torch.is_grad_enabled(), ids.size(0)))
        if torch.is_grad_enabled():  # filler rows (one prompt token, nothing to train) are not samples
            trained.update(t for row, m in zip(ids, mask, strict=True) if len(t := tuple(row[m.bool()].tolist())) > 1)

    trainer.model.register_forward_pre_hook(count, with_kwargs=True)
    trainer.ref_model.register_forward_pre_hook(count, with_kwargs=True)  # reference log-probs (β > 0), no grad
    before = [p.detach().clone() for p in trainer.model.parameters()]
    trainer.train()
    expected: Counter[tuple[int, ...]] = Counter()
    for round_log in trainer.turn_log:
        for episode in round_log["episodes"]:
            rollout = fixed.episodes[(episode["game_id"], episode["index"] % 2)]
            expected.update(tuple(t.prompt_ids + t.completion_ids) for t in rollout.turns)
    turns_per_step = sum(len(r.turns) for r in fixed.episodes.values())
    assert len(trainer.turn_log) == 2 and sum(expected.values()) == 2 * turns_per_step > 2 * 5
    assert trained == expected  # every turn once per step, nothing dropped, nothing twice
    assert max(n for _, n in sizes) <= 5 and any(grad for grad, _ in sizes) and any(not g for g, _ in sizes)
    assert any(e["advantage"] != 0 for r in trainer.turn_log for e in r["episodes"])  # the groups carry signal
    assert any(not torch.equal(a, p.detach()) for a, p in zip(before, trainer.model.parameters(), strict=True))
    assert trainer.peak_micro_batch == 5
    timed = [h for h in trainer.state.log_history if "time/train_seconds" in h]  # where a step's time went
    assert len(timed) == 2 and all(h["time/rollout_seconds"] > 0 and h["time/train_seconds"] > 0
                                   and h["time/scoring_seconds"] > 0 for h in timed)


def test_episode_level_loss_reaches_the_update(tiny_grpo, tmp_path: Path) -> None:
    """The same fixed rollouts (a group of a 30-step and a 4-step episode: different lengths) from the same start:
    a step with episodes weighed equally moves the weights elsewhere than a step with tokens weighed equally."""
    from evoharness.training.grpo import build_grpo_trainer

    model_dir, fixed, _ = tiny_grpo
    trained = []
    for episode_level in (False, True):
        settings = tiny_grpo_settings(games_limit=2, games_per_step=2, num_generations=2, max_steps=1,
                                             save_steps=None, episode_level_loss=episode_level)
        trainer = build_grpo_trainer(str(model_dir), tmp_path / str(episode_level), settings, fixed)
        trainer.train()
        trained.append([p.detach().clone() for p in trainer.model.parameters()])
    lengths = {len(r.turns) for r in fixed.episodes.values()}
    assert len(lengths) > 1  # the group's episodes differ in length: the weighting matters
    assert any(not torch.equal(a, b) for a, b in zip(*trained, strict=True))


def test_progress_reward_reaches_the_update(tiny_grpo, tmp_path: Path) -> None:
    """With λ_prog on, each fixed rollout's reward holds how far towards its goal it got: the won 30-step episodes 1,
    the 4-step ones (cut short of the goal) less."""
    from evoharness.training.grpo import build_grpo_trainer
    from evoharness.training.reward import RewardConfig, TrajectoryStats

    model_dir, fixed, _ = tiny_grpo
    settings = tiny_grpo_settings(games_limit=2, games_per_step=2, num_generations=2, max_steps=1, save_steps=None,
                                  reward=RewardConfig(progress_weight=1.0))
    trainer = build_grpo_trainer(str(model_dir), tmp_path, settings, fixed)
    trainer.train()
    (logged,) = [entry for entry in trainer.state.log_history if "rewards/progress_reward/mean" in entry]
    progress = [TrajectoryStats.from_record(r.record, with_progress=True).progress for r in fixed.episodes.values()]
    assert 1.0 in progress and min(progress) < 1.0  # won and cut-short episodes
    assert logged["rewards/progress_reward/mean"] == pytest.approx(sum(progress) / len(progress))


@pytest.mark.parametrize("all_guided", [False, True])
def test_a_guided_run_logs_the_policys_own_success_apart_from_the_guided_episodes(tiny_grpo, tmp_path: Path,
                                                                                 all_guided: bool) -> None:
    """Fixed rollouts whose first member of each group is marked guided: the step's log has the success of the
    guided episodes and of the policy's own apart, each computed from its episodes. With every episode guided (as
    under avoid_repeats) there is no such split."""
    from dataclasses import replace

    from evoharness.training.fixed_rollouts import FixedRollouts
    from evoharness.training.grpo import build_grpo_trainer

    model_dir, fixed, games = tiny_grpo
    guided = FixedRollouts({key: replace(r, guided=all_guided or key[1] == 0) for key, r in fixed.episodes.items()},
                           fixed.group)
    settings = tiny_grpo_settings(games_limit=2, games_per_step=2, num_generations=2, max_steps=1,
                                         save_steps=None)
    trainer = build_grpo_trainer(str(model_dir), tmp_path, settings, guided)
    trainer.train()
    [logged] = [h for h in trainer.state.log_history if "episode/success" in h]
    success = {member: sum(fixed.episodes[(g, member)].record.won for g in games[:2]) / 2 for member in (0, 1)}
    if all_guided:
        assert "episode/success_unguided" not in logged and "episode/success_guided" not in logged
        return
    assert success[0] != success[1]  # the 30-step and the 4-step member: the split is visible
    assert logged["episode/success_guided"] == pytest.approx(success[0])
    assert logged["episode/success_unguided"] == pytest.approx(success[1])
    assert logged["episode/success"] == pytest.approx((success[0] + success[1]) / 2)


RESUMABLE = tiny_grpo_settings(games_limit=2, games_per_step=1, num_generations=2, max_steps=4,
                                      per_device_train_batch_size=8, save_steps=1, learning_rate=1e-3)
KILLED_RUN = """
import sys, time
from evoharness.training.fixed_rollouts import FixedRollouts
from evoharness.training.grpo import train_grpo
from evoharness.training.grpo_config import GRPOSettings
settings = GRPOSettings.model_validate_json(sys.argv[3])
train_grpo(sys.argv[1], sys.argv[2], settings, rollouts=FixedRollouts.load(sys.argv[4]),
           on_log=lambda logs, step, total: time.sleep(2))  # slow enough to be killed between checkpoints
"""


@pytest.mark.slow
def test_grpo_resumes_after_a_kill_and_ends_with_the_same_model(tiny_grpo, tmp_path: Path) -> None:
    import os
    import signal
    import subprocess
    import sys
    import time

    from safetensors.torch import load_file

    from evoharness.training.grpo import train_grpo
    from evoharness.training.trainer_utils import newest_checkpoint

    model_dir, fixed, _ = tiny_grpo
    fixed.save(tmp_path / "rollouts.pkl")
    killed = tmp_path / "killed"
    repo = Path(__file__).resolve().parents[1]
    env = os.environ | {"PYTHONPATH": os.pathsep.join([str(repo), os.environ.get("PYTHONPATH", "")])}
    child = subprocess.Popen([sys.executable, "-c", KILLED_RUN, str(model_dir), str(killed),
                              RESUMABLE.model_dump_json(), str(tmp_path / "rollouts.pkl")], env=env,
                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 300
    while newest_checkpoint(killed / "checkpoints") is None and child.poll() is None and time.monotonic() < deadline:
        time.sleep(0.2)
    os.kill(child.pid, signal.SIGKILL)
    child.wait()
    assert child.returncode == -signal.SIGKILL, child.stderr.read().decode()[-2000:] if child.stderr else ""
    checkpoint = newest_checkpoint(killed / "checkpoints")
    assert checkpoint is not None and not (killed / "model").exists()  # killed mid-run, after a checkpoint
    done_before = int(checkpoint.rsplit("-", 1)[1])
    assert done_before < RESUMABLE.max_steps

    resumed_steps: list[int] = []
    resumed = train_grpo(str(model_dir), killed, RESUMABLE, rollouts=fixed,
                         on_log=lambda logs, step, _: resumed_steps.append(step) if "loss" in logs else None)
    assert resumed.steps == RESUMABLE.max_steps and resumed_steps[0] == done_before + 1  # resumed, not restarted
    assert [h["step"] for h in resumed.history] == [1.0, 2.0, 3.0, 4.0]  # the whole history, across the kill

    straight = train_grpo(str(model_dir), tmp_path / "straight", RESUMABLE, rollouts=fixed)
    a, b = load_file(Path(resumed.model_dir) / "model.safetensors"), load_file(
        Path(straight.model_dir) / "model.safetensors")
    for name in a:
        torch.testing.assert_close(a[name], b[name], rtol=1e-5, atol=1e-6)


def test_a_switch_added_later_leaves_the_ids_of_earlier_versions_alone() -> None:
    """``avoid_repeats`` off is left out of the id: the GRPO version trained before it existed (students.json's
    expert-grpo-fa47c632d8de) keeps its id for the same command; on, it is another training."""
    settings = recipe_settings("small", "grpo", max_steps=28, learning_rate=1e-4, save_steps=4,
                               bf16=True,  # it trained on a CPU with bf16 units
                               episode_level_loss=False,  # before the preset weighed episodes
                               guided_per_group=0)  # and before guided groups
    assert version_id("expert", "grpo", "expert-sft-29dcf9a1cd6c", settings) == "expert-grpo-fa47c632d8de"
    for switch in ({"avoid_repeats": True}, {"guided_per_group": 1}):
        switched = settings.model_copy(update=switch)
        assert version_id("expert", "grpo", "expert-sft-29dcf9a1cd6c", switched) != "expert-grpo-fa47c632d8de"


def test_the_kl_check_warns_when_a_run_moved_far_from_its_parent() -> None:
    """The round-2 run that lost 27 points of valid_unseen logged KL 4.96 at step 11: the check warns on it."""
    import assets.training as at

    limit = at.GRPORunConfig().kl_warning
    drifted = at.kl_check([{"step": 1, "kl": 7e-6}, {"step": 11, "kl": 4.96}], limit)
    assert not drifted.passed and drifted.severity == dg.AssetCheckSeverity.WARN
    assert drifted.metadata["peak_kl"].value == 4.96
    assert at.kl_check([{"step": 1, "kl": 0.01}, {"step": 12, "kl": 0.36}], limit).passed  # its replicate won more
    unlogged = at.kl_check([{"step": 1}], limit)  # beta 0: TRL logs no KL, so none is reported
    assert unlogged.passed and "peak_kl" not in unlogged.metadata

