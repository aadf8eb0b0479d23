"""The fast ALFWorld engine: parsing, hand-checked texts, inadmissible commands, the expert, and a
differential test against the real engine (textworld PddlEnv)."""

from __future__ import annotations

import pytest

from evoharness.envs.alfworld.catalog import SPLITS, TASK_TYPES, AlfworldDataError
from evoharness.envs.alfworld.differential import (
    CHECKER_VERSION,
    GameReport,
    Mismatch,
    append_report,
    compare_step,
    load_reports,
    run_differential,
    run_game,
    summarize,
)
from evoharness.envs.alfworld.fast_engine import FastAlfworldEnv
from evoharness.envs.alfworld.fast_engine.goal import holds
from evoharness.envs.alfworld.fast_engine.names import demangle_all
from evoharness.envs.alfworld.fast_engine.pddl import check_supported, parse_problem
from evoharness.envs.alfworld.fast_engine.rules import display_list
from evoharness.envs.base import StepResult, WorldFacts

LAMP_GAME = "valid_seen/look_at_obj_in_light-AlarmClock-None-DeskLamp-323/trial_T20190909_044715_250790"


@pytest.fixture(scope="module")
def lamp_game(catalog):
    return catalog.get(LAMP_GAME)


def test_demangle_numbers_ids_from_the_last_sorted_one():
    names = demangle_all(["book_bar__plus_00_dot_1", "book_bar__minus_00_dot_2", "agent1",
                          "sink_bar__plus_01_bar_sinkbasin", "sink_bar__plus_01"])
    # sorted ids: book_bar__minus... < book_bar__plus...; the first sorted id gets the highest number
    assert names["book_bar__minus_00_dot_2"] == "book 2"
    assert names["book_bar__plus_00_dot_1"] == "book 1"
    assert names["sink_bar__plus_01_bar_sinkbasin"] == "sinkbasin 1"
    assert names["sink_bar__plus_01"] == "sink 1"
    assert names["agent1"] == "agent1 "


def test_display_list_matches_textworld():
    assert display_list([]) == "nothing"
    assert display_list(["a x"]) == "a x"
    assert display_list(["a x", "a y"]) == "a x, and a y"
    assert display_list(["a x", "a y", "a z"]) == "a x, a y, and a z"


def test_parse_problem_and_goal(lamp_game):
    data = lamp_game.load_game_json()
    check_supported(data, str(lamp_game.game_path))
    problem = parse_problem(data["pddl_problem"])
    assert problem.types["agent1"] == "agent"
    assert ("atlocation", ("agent1", "loc_bar_1_bar_4_bar_1_bar_30")) in problem.init
    assert sum(1 for pred, _ in problem.init if pred == "receptacleatlocation") == 19
    assert problem.goal[0] == "and" and problem.goal[1][0] == "exists"
    facts = {"atom": {("x",)}}
    assert holds(("exists", ("v",), ("atom", "atom", ("?v",))), lambda p: facts.get(p, set()))
    assert not holds(("exists", ("v",), ("and", ("atom", "atom", ("?v",)), ("not", ("=", "?v", "x")))),
                     lambda p: facts.get(p, set()))


def test_unsupported_domain_is_refused(lamp_game):
    data = dict(lamp_game.load_game_json())
    data["pddl_domain"] = data["pddl_domain"].replace("(:action look", "(:action peek")
    with pytest.raises(AlfworldDataError):
        check_supported(data, "edited")


def test_intro_and_hand_checked_steps(lamp_game):
    env = FastAlfworldEnv(lamp_game)
    first = env.reset(0)
    assert first.observation.startswith(
        "-= Welcome to TextWorld, ALFRED! =-\n\nYou are in the middle of a room. Looking quickly around you, "
        "you see a bed 2, a bed 1, a desk 1, a drawer 11, a drawer 10, a drawer 9,")
    assert first.objective == "look at alarmclock under the desklamp."
    assert first.admissible_commands[:3] == ("go to bed 1", "go to bed 2", "go to desk 1")
    assert first.admissible_commands[-3:] == ("help", "inventory", "look")
    # Texts below were read off the real engine for this game.
    assert env.step("look").observation == (
        "You are in the middle of a room. Looking quickly around you, you see nothing.")
    at_desk = env.step("go to desk 1")
    assert at_desk.observation == (
        "You arrive at desk 1. On the desk 1, you see a alarmclock 2, a book 1, a bowl 1, a cd 2, a desklamp 1, "
        "a mug 2, a mug 1, a pen 2, and a pen 1.")
    assert "go to desk 1" not in at_desk.admissible_commands
    assert "use desklamp 1" in at_desk.admissible_commands
    assert "examine desklamp 1" not in at_desk.admissible_commands  # only held objects can be examined
    assert env.step("use desklamp 1").observation == "You turn on the desklamp 1."
    took = env.step("take alarmclock 2 from desk 1")
    assert took.observation == "You pick up the alarmclock 2 from the desk 1."
    assert took.won and took.done and took.score == 1.0
    assert env.step("inventory").observation == "You are carrying: a alarmclock 2."
    assert env.step("go to drawer 1").observation == "You arrive at drawer 1. The drawer 1 is closed."
    assert env.step("open drawer 1").observation == (
        "You open the drawer 1. The drawer 1 is open. In it, you see a creditcard 1.")
    facts = env.facts()
    assert facts.holding == frozenset({"alarmclock 2"})
    assert "drawer 1" in facts.opened and facts.agent_near == frozenset({"drawer 1"})
    assert "on" in facts.flags["desklamp 1"]


def test_inadmissible_commands_change_nothing(lamp_game):
    env = FastAlfworldEnv(lamp_game)
    start = env.reset(0)
    before = env.facts()
    for command in ("jump", "take alarmclock 2 from desk 1", "go to", "open bed 1"):
        result = env.step(command)
        assert result.observation == "Nothing happens."
        assert result.valid is False
        assert result.admissible_commands == start.admissible_commands
        assert env.facts() == before
    # textworld strips the command before matching it, but the adapter reports validity on the raw text
    spaced = env.step("look ")
    assert spaced.valid is False and spaced.observation.startswith("You are in the middle of a room.")


def test_walkthroughs_win_in_every_game(catalog):
    games = catalog.all_games()
    for game in games:
        env = FastAlfworldEnv(game)
        result = env.reset(0)
        assert not result.won, game.game_id
        for command in game.load_game_json()["walkthrough"]:
            assert command in result.admissible_commands, (game.game_id, command)
            result = env.step(command)
        assert result.won and result.done, game.game_id
    assert len(games) >= 1000


def test_expert_is_seeded_and_solves_games(catalog):
    for game in catalog.games("valid_unseen", limit=6):
        runs = []
        for _ in range(2):
            env = FastAlfworldEnv(game, expert=True)
            result = env.reset(7)
            commands = []
            while not result.done and len(commands) < 200:
                commands.append(result.expert_plan[0])
                result = env.step(commands[-1])
            runs.append((commands, result.won))
        assert runs[0] == runs[1], game.game_id
        assert runs[0][1], game.game_id
        assert runs[0][0][0] == "look"  # ALFWorld's expert always starts by looking


def test_compare_step_detects_each_kind_of_difference():
    base = StepResult("obs", ("look",), "task", False, False, 0.0, True)
    facts = WorldFacts(located={"apple 1": frozenset({"fridge 1"})})
    assert compare_step(base, base, facts, facts) is None
    changed = StepResult("other", ("look",), "task", False, False, 0.0, True)
    assert compare_step(base, changed, facts, facts)[0] == "observation"
    reordered = StepResult("obs", ("look", "help"), "task", False, False, 0.0, True)
    assert compare_step(base, reordered, facts, facts)[0] == "admissible_commands"
    moved = WorldFacts(located={"apple 1": frozenset({"countertop 1"})})
    assert compare_step(base, base, facts, moved)[0] == "facts.located"
    # an object in two receptacles (a keychain in a safe on a dresser) is located in both
    both = WorldFacts(located={"apple 1": frozenset({"fridge 1", "countertop 1"})})
    assert compare_step(base, base, facts, both)[0] == "facts.located"


def test_differential_one_game_quick(catalog):
    game = catalog.games("valid_unseen", limit=1)[0]
    report = run_game(game, seeds=(0,), walk_steps=12, expert=False)
    assert report.error == ""
    assert report.episodes == 2 and report.steps > 12
    assert report.mismatches == []


@pytest.mark.slow
def test_differential_sample_across_splits_and_task_types(catalog):
    """10 games per split (catalog order is round-robin over task types): 30 games, all six types in each split.

    About 700 game-seconds on the real engine (its planner is slow on a few games: the first 20 of valid_unseen
    hold two of 590 s and 405 s, which ran past the test timeout in CI); the full run is in benchmarks/results."""
    official = [split for split in SPLITS if split != "dev"]  # dev games are official train games
    games = [g for split in official for g in catalog.games(split, limit=10)]
    assert all({g.task_type for g in games if g.split == split} == set(TASK_TYPES) for split in official)
    reports = run_differential(games, workers=2, progress=False)
    assert [r.error for r in reports if r.error] == []
    mismatches = [m for r in reports for m in r.mismatches]
    assert mismatches == [], mismatches[:3]
    assert sum(s.steps for s in summarize(reports)) > 30 * 100


def test_reports_resume_only_clean_current_version_games(tmp_path) -> None:
    path = str(tmp_path / "reports.jsonl")
    clean = GameReport("g1", "train", "pick_and_place_simple", steps=10, episodes=5)
    mismatch = Mismatch("g2", "random-0", 3, "look", "observation", "a", "b")
    bad = GameReport("g2", "train", "pick_and_place_simple", steps=3, mismatches=[mismatch])
    broken = GameReport("g3", "train", "pick_and_place_simple", error="IOError: x")
    old = GameReport("g4", "train", "pick_and_place_simple", checker=CHECKER_VERSION - 1)
    for report in (clean, bad, broken, old):
        append_report(path, report)
    found = load_reports(path, {"g1", "g2", "g3", "g4"})
    assert set(found) == {"g1", "g2"}  # errors and older checkers run again
    assert found["g2"].mismatches == [mismatch] and found["g1"].steps == 10
    assert load_reports(path, {"g9"}) == {} and load_reports(str(tmp_path / "none.jsonl"), {"g1"}) == {}
