"""Students that play: a student overfit on a train game wins it, and plays the same game turn for turn when served
by the engine server with its turn grammar; GRPO on that winnable game scores a non-zero ``solved`` term and
changes the weights; an interrupted SFT run resumes to the same model."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

from evoharness.collection import CollectionConfig
from evoharness.evaluation.run import EvaluationConfig, evaluate
from evoharness.serving import ServedModel, ServeSettings
from evoharness.teachers.clients.structured import StructuredOutputs
from tests.conftest import tiny_grpo_settings, train_grpo_version
from warehouse import Warehouse

REPO = Path(__file__).resolve().parents[1]
TRAINED_BUDGET = CollectionConfig.max_steps
"""The step budget the overfit fixture's expert episode was collected under: it is in every prompt ("Step 3/70"),
and a student that memorised ten turns plays them back only under the same text."""


def test_overfit_student_wins_its_game(overfit: tuple[Path, str, Path]) -> None:
    db, model_version, _ = overfit
    with Warehouse(db) as wh:
        result = evaluate(wh, EvaluationConfig(model_version=model_version, splits=("train",), limit=1,
                                               max_steps=TRAINED_BUDGET, max_tokens=64), "eval")
        played = wh.con.execute("SELECT won, n_steps, n_invalid FROM episodes WHERE teacher = ?",
                                [model_version]).fetchall()
    assert result.by_split["train"].won == 1
    assert played[0][0] and played[0][2] == 0  # won, and no invalid turn (actions are decoded constrained)


def test_a_student_served_with_its_grammar_plays_its_game_turn_for_turn(overfit: tuple[Path, str, Path],
                                                                        tmp_path: Path) -> None:
    """Over real HTTP (the openai SDK against the engine server), the turn grammar in vLLM's structured_outputs
    field: the served student takes every action the student played locally takes, under the same policy name."""
    db, model_version, _ = overfit
    config = EvaluationConfig(model_version=model_version, splits=("train",), limit=1, max_steps=TRAINED_BUDGET,
                              max_tokens=64, processes=1)
    actions = {}
    for arm in ("local", "served"):
        copy = Path(shutil.copy(db, tmp_path / f"{arm}.duckdb"))
        with Warehouse(copy) as wh:
            wh.con.execute("DELETE FROM steps WHERE episode_id IN (SELECT episode_id FROM episodes WHERE teacher = ?)",
                           [model_version])  # another test of the module may have played it already
            wh.con.execute("DELETE FROM episodes WHERE teacher = ?", [model_version])
            model_dir = wh.one("model_version_player", model_version=model_version)[0]
        if arm == "served":
            served = ServedModel(model_dir, ServeSettings(server="evoharness", log_path=tmp_path / "serve.log"))
            config = config.model_copy(update={"serve_url": served.start().base_url, "served_model": served.model,
                                               "structured_outputs": StructuredOutputs.VLLM})
        try:
            with Warehouse(copy) as wh:
                result = evaluate(wh, config, f"eval-{arm}")
                actions[arm] = wh.con.execute(
                    "SELECT list(action ORDER BY t) FROM steps JOIN episodes USING (episode_id) WHERE teacher = ?",
                    [model_version]).fetchone()[0]
        finally:
            if arm == "served":
                served.stop()
        assert result.by_split["train"].won == 1, arm
    assert config.policy == model_version  # a served version decoding under its grammar is the version itself
    assert len(actions["local"]) > 3 and actions["served"] == actions["local"]


def test_grpo_on_a_winnable_game_scores_and_updates(overfit: tuple[Path, str, Path]) -> None:
    import torch
    from transformers import AutoModelForCausalLM

    db, model_version, models = overfit
    settings = tiny_grpo_settings(games_limit=1, games_per_step=1, num_generations=6, max_steps=1,
                                         episode_steps=TRAINED_BUDGET, temperature=1.0, max_new_tokens=64,
                                         learning_rate=1e-3)
    with Warehouse(db) as wh:
        grpo = train_grpo_version(wh, model_version, settings, models, "grpo", engine="fast")
        sft_path = wh.scalar("SELECT path FROM model_versions WHERE model_version = ?", [model_version])
    step = grpo.row["rollout_history"][0]
    assert step["rewards/solved_reward/mean"] > 0  # at least one of the group won the game
    assert 0 < step["episode/success"] < 1  # sampled at T=1 the memorised game is won by some of the group only,
    assert step["reward_std"] > 0  # a group that all won alike would have no advantage to learn from
    before = AutoModelForCausalLM.from_pretrained(sft_path).state_dict()
    after = AutoModelForCausalLM.from_pretrained(grpo.path).state_dict()
    changed = [name for name, weight in after.items() if not torch.equal(weight, before[name])]
    assert changed, "a GRPO step left every weight as it was"


RESUMABLE_RUN = """
import sys
from evoharness.training.sft import train_sft
from tests.conftest import tiny_sft_settings
settings = tiny_sft_settings(max_steps=6, save_steps=2, logging_steps=1, max_length=1024)
train_sft(sys.argv[1], sys.argv[2], settings)
"""


def _train(dataset: str, output: Path) -> subprocess.Popen[bytes]:
    """A training child process; its stderr goes to ``<output>.log`` (appended), for :func:`_finished`."""
    env = os.environ | {"PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
    with open(f"{output}.log", "ab") as log:
        return subprocess.Popen([sys.executable, "-c", RESUMABLE_RUN, dataset, str(output)], env=env,
                                stdout=subprocess.DEVNULL, stderr=log)


def _finished(run: subprocess.Popen[bytes], output: Path) -> None:
    """Wait for ``run``; if it failed, the assertion shows the end of its stderr."""
    assert run.wait(timeout=600) == 0, Path(f"{output}.log").read_text()[-4000:]


def test_sft_killed_mid_run_resumes_to_the_same_model(curated: tuple[Path, str], tmp_path: Path) -> None:
    import torch
    from transformers import AutoModelForCausalLM

    straight, interrupted = tmp_path / "straight", tmp_path / "interrupted"
    _finished(_train(curated[1], straight), straight)
    run = _train(curated[1], interrupted)
    deadline = time.monotonic() + 600
    while not (interrupted / "checkpoints" / "checkpoint-2").is_dir():
        assert run.poll() is None and time.monotonic() < deadline, "the run ended before its first checkpoint"
        time.sleep(0.2)
    run.send_signal(signal.SIGKILL)
    run.wait()
    assert not (interrupted / "model").exists()
    _finished(_train(curated[1], interrupted), interrupted)  # resumes from the last complete checkpoint
    a = AutoModelForCausalLM.from_pretrained(straight / "model").state_dict()
    b = AutoModelForCausalLM.from_pretrained(interrupted / "model").state_dict()
    assert all(torch.allclose(a[name], b[name], atol=1e-5) for name in a)
