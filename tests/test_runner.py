"""The episode runner and the environment pool on the real engine."""

import asyncio
import json
from dataclasses import dataclass, field

import pytest

from evoharness.agents.records import EpisodeSpec
from evoharness.agents.runner import RunSettings, run_episode, run_episodes
from evoharness.envs.alfworld.goals import Goal
from evoharness.envs.pool import EnvPool, EnvWorkerError
from evoharness.harness.budget import StepBudget
from evoharness.harness.prompts import Mode, load_prompt_set
from evoharness.teachers.base import PolicyError, PolicyOutput, TurnContext
from evoharness.teachers.expert import ExpertTeacher


@dataclass
class ScriptedPolicy:
    """Plays fixed texts in order (then 'look'); records the prompts it saw."""

    texts: list[str]
    name: str = "scripted"
    needs_expert: bool = False
    prompts: list[str] = field(default_factory=list)

    def start_episode(self, episode_id: str, objective: str) -> "ScriptedPolicy":
        return self

    async def act(self, context: TurnContext) -> PolicyOutput:
        self.prompts.append(context.prompt.user)
        text = self.texts.pop(0) if self.texts else "<think>wait</think><action>look</action>"
        if text == "RAISE":
            raise PolicyError("provider refused")
        return PolicyOutput(text, input_tokens=10, output_tokens=5, cost_usd=0.001)


def _spec(game, mode: Mode, teacher: str = "scripted", max_steps: int = 70, seed: int = 0) -> EpisodeSpec:
    prompts = load_prompt_set(f"alfworld/{mode.value}")
    return EpisodeSpec(teacher, game, mode, seed, max_steps, prompts.prompt_id, prompts.sha256)


def _walkthrough(game) -> list[str]:
    return json.loads(game.game_path.read_text())["walkthrough"]


def _run(spec, policy, pool, max_steps=70, meta_cost=1):
    settings = RunSettings(budget=StepBudget(max_steps=max_steps, meta_action_cost=meta_cost))
    return asyncio.run(run_episode(spec, policy, pool, load_prompt_set(spec.prompt_id), settings))


@pytest.fixture(scope="module")
def game(catalog):
    return catalog.games("valid_seen", limit=1)[0]


@pytest.fixture(scope="module")
def local_pool():
    with EnvPool(workers=0, engine="textworld") as pool:
        yield pool


def test_react_episode_counts_invalid_turns_and_wins(game, local_pool) -> None:
    texts = ["I will look around.", "<think>q</think><action>recall [apple]</action>"]
    texts += [f"<think>go</think><action>{c}</action>" for c in _walkthrough(game)]
    policy = ScriptedPolicy(texts)
    record = _run(_spec(game, Mode.REACT), policy, local_pool)
    kinds = [s.kind for s in record.steps]
    assert kinds[:2] == ["invalid", "invalid"]
    assert record.steps[0].parse_error == "missing <action>…</action>"
    assert "react mode" in record.steps[1].parse_error
    assert record.won and record.steps[-1].done and record.status == "finished"
    assert record.input_tokens == 10 * len(record.steps) and record.cost_usd == pytest.approx(0.001 * len(record.steps))
    assert "Belief:" not in policy.prompts[0] and "Admissible commands:" in policy.prompts[0]
    assert record.objective and Goal.parse(record.objective)  # the game's task as the environment stated it


def test_meta_actions_cost_steps_and_budget_stops_the_episode(game, local_pool) -> None:
    policy = ScriptedPolicy(["<think>t</think><action>track [desk]</action>"] * 10)
    record = _run(_spec(game, Mode.BPE, max_steps=4), policy, local_pool, max_steps=4)
    assert len(record.steps) == 4 and not record.won
    assert all(s.kind == "track" for s in record.steps)
    assert "Belief:" in policy.prompts[0] and "Step 4 of 4." in policy.prompts[3]


def test_free_meta_actions_are_still_bounded(game, local_pool) -> None:
    policy = ScriptedPolicy(["<think>t</think><action>note [x]</action>"] * 100)
    record = _run(_spec(game, Mode.BPE, max_steps=5), policy, local_pool, max_steps=5, meta_cost=0)
    assert len(record.steps) == 15  # the hard cap: three turns per budget step


def test_policy_error_fails_the_episode_with_its_reason(game, local_pool) -> None:
    record = _run(_spec(game, Mode.BPE), ScriptedPolicy(["<think>a</think><action>look</action>", "RAISE"]), local_pool)
    assert record.status == "failed" and not record.won
    assert record.failure_reason == "PolicyError: provider refused"
    assert len(record.steps) == 1


def test_expert_episodes_are_reproducible_across_workers_and_interleaving(catalog) -> None:
    games = catalog.games("valid_seen", limit=3)
    specs = [_spec(g, Mode.BPE, teacher="expert", seed=7) for g in games]
    prompts = load_prompt_set("alfworld/bpe")
    runs = []
    for workers, concurrency in [(1, 3), (2, 1)]:
        with EnvPool(workers=workers, engine="textworld", expert=True) as pool:
            records = asyncio.run(run_episodes(specs, ExpertTeacher(), pool, prompts, RunSettings(concurrency=concurrency)))
        runs.append([[s.action for s in r.steps] for r in records])
    assert runs[0] == runs[1]
    assert all(actions for actions in runs[0])


def test_a_dead_worker_fails_its_episodes_instead_of_hanging(game) -> None:
    async def scenario(pool: EnvPool) -> None:
        env, first = await pool.open(game, seed=0)
        assert first.objective
        pool._procs[env.worker].kill()
        with pytest.raises(EnvWorkerError, match="died"):
            await asyncio.wait_for(env.step("look"), timeout=30)
        with pytest.raises(EnvWorkerError, match="died"):  # later calls fail at once (broken pipe)
            await asyncio.wait_for(env.step("look"), timeout=30)

    with EnvPool(workers=1, engine="textworld") as pool:
        asyncio.run(scenario(pool))
