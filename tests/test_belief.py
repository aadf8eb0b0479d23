"""Belief: the scene-graph parser, checked sentence by sentence and against the real engine's facts."""

import pytest

from evoharness.envs.alfworld import make_env
from evoharness.envs.alfworld.belief import AlfworldBelief, belief_accuracy, parse_items
from evoharness.envs.alfworld.catalog import TASK_TYPES

INTRO = (
    "-= Welcome to TextWorld, ALFRED! =-\n\nYou are in the middle of a room. Looking quickly around you, you see "
    "a cabinet 2, a cabinet 1, a countertop 1, a fridge 1, and a microwave 1.\n\nYour task is to: put a hot apple in fridge."
)


def test_parse_items() -> None:
    assert parse_items("a apple 1, a bread 2, and a knife 1") == ["apple 1", "bread 2", "knife 1"]
    assert parse_items("nothing") == []
    assert parse_items("a egg 2") == ["egg 2"]


def test_sentences_update_the_scene_graph() -> None:
    belief = AlfworldBelief()
    belief.reset(INTRO, "put a hot apple in fridge.")
    assert belief.receptacles == ["cabinet 2", "cabinet 1", "countertop 1", "fridge 1", "microwave 1"]
    belief.update("go to countertop 1", "You arrive at countertop 1. On the countertop 1, you see a apple 1, and a knife 2.")
    assert belief.at == "countertop 1" and belief.contents("countertop 1") == ["apple 1", "knife 2"]
    belief.update("take apple 1 from countertop 1", "You pick up the apple 1 from the countertop 1.")
    assert belief.holding == ["apple 1"] and "apple 1" not in belief.located
    belief.update("go to microwave 1", "You arrive at microwave 1. The microwave 1 is closed.")
    assert "microwave 1" in belief.closed
    belief.update("heat apple 1 with microwave 1", "You heat the apple 1 using the microwave 1.")
    assert belief.flags["apple 1"] == {"hot"}
    belief.update("go to fridge 1", "You arrive at fridge 1. The fridge 1 is closed.")
    belief.update("open fridge 1", "You open the fridge 1. The fridge 1 is open. In it, you see a egg 1.")
    assert "fridge 1" in belief.opened and belief.located["egg 1"] == "fridge 1"
    belief.update("move apple 1 to fridge 1", "You move the apple 1 to the fridge 1.")
    assert belief.holding == [] and belief.located["apple 1"] == "fridge 1"
    belief.update("take egg 1 from fridge 1", "Nothing happens.")
    assert belief.located["egg 1"] == "fridge 1"
    # contents sentences replace stale beliefs about a receptacle
    belief.update("go to countertop 1", "You arrive at countertop 1. On the countertop 1, you see nothing.")
    assert belief.contents("countertop 1") == []
    assert "apple 1 (hot) is in/on fridge 1" in belief.track("apple")
    assert "Not yet visited: cabinet 2, cabinet 1" in belief.track("plate")


def test_render_is_capped_and_goal_first() -> None:
    belief = AlfworldBelief(max_render_objects=2)
    belief.reset(INTRO, "put a hot apple in fridge.")
    belief.update("go to countertop 1", "You arrive at countertop 1. On the countertop 1, you see a bread 1, a apple 1, and a knife 2.")
    view = belief.render()
    assert "apple 1 in/on countertop 1" in view and "1 more" in view and "knife 2" not in view


def test_student_rendering_lists_unvisited_places_in_the_rooms_order() -> None:
    from evoharness.harness.prompts import load_prompt_set

    belief = AlfworldBelief()
    belief.reset(INTRO, "put a hot apple in fridge.")
    belief.update("go to countertop 1", "You arrive at countertop 1. On the countertop 1, you see a apple 1, and a knife 2.")
    belief.update("take apple 1 from countertop 1", "You pick up the apple 1 from the countertop 1.")
    belief.update("go to microwave 1", "You arrive at microwave 1. The microwave 1 is closed.")
    belief.update("heat apple 1 with microwave 1", "You heat the apple 1 using the microwave 1.")
    turn_vars = {"objective": "put a hot apple in fridge.", "step": 5, "max_steps": 70, "observation": "x",
                 "admissible_commands": ["go to fridge 1", "open microwave 1"], "recent_actions": [],
                 "belief_state": belief.snapshot(), "progress": "(no subgoals yet)", "bank_label": "b@v0",
                 "notes_buffered": 0}
    view = load_prompt_set("alfworld/bpe_student").render({"max_steps": 70}, turn_vars).user
    assert "unvisited: cabinet 2, cabinet 1, fridge 1" in view  # as the room listed them; compact sorts them
    assert "unvisited: cabinet 1, cabinet 2, fridge 1" in belief.render_compact()
    assert "at: microwave 1 | holding: apple 1 (hot)" in view and "other objects seen: 1" in view


@pytest.mark.parametrize("task_type", TASK_TYPES)
def test_belief_matches_engine_facts_on_real_games(catalog, task_type: str) -> None:
    """Run the handcoded expert on the real engine; at every step the belief must agree with the facts."""
    game = catalog.games("valid_seen", task_types=[task_type], limit=1)[0]
    env = make_env(game, engine="textworld", expert=True)
    try:
        result = env.reset(seed=0)
        belief = AlfworldBelief()
        belief.reset(result.observation, result.objective)
        claims = correct = observable = recalled = 0
        for _ in range(60):
            if result.done:
                break
            command = result.expert_plan[0]
            result = env.step(command)
            belief.update(command, result.observation)
            accuracy = belief_accuracy(belief, env.facts())
            claims += accuracy.claims
            correct += accuracy.correct
            observable += accuracy.observable
            recalled += accuracy.recalled
        assert result.won, f"the expert did not solve {game.game_id}"
        assert claims > 0 and observable > 0
        assert correct == claims, f"precision {correct}/{claims} on {game.game_id}"
        assert recalled == observable, f"recall {recalled}/{observable} on {game.game_id}"
    finally:
        env.close()
