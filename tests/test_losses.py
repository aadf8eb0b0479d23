"""How far an episode got towards its goal (evoharness.envs.alfworld.goals: goals read from ALFWorld's templates, the
first stage never got past, progress) and where lost games stopped (evoharness.evaluation.losses: the table
`evoharness losses` prints), read from real expert episodes cut short."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from types import ModuleType

import pytest

from evoharness.collection import CollectionConfig, collect
from evoharness.envs.alfworld.goals import STAGE_ORDER, Goal, GoalReach, goal_progress, goal_reach
from evoharness.evaluation.losses import LostGame, loss_table, lost_games
from warehouse import Warehouse


@pytest.mark.parametrize(("objective", "goal"), [
    ("put some spraybottle on toilet.", Goal("spraybottle", None, "toilet", 1)),
    ("put a clean apple in fridge.", Goal("apple", "clean", "fridge", 1)),
    ("heat some egg and put it in garbagecan.", Goal("egg", "heat", "garbagecan", 1)),
    ("put a cool mug in coffeemachine.", Goal("mug", "cool", "coffeemachine", 1)),
    ("find two pillow and put them in sofa.", Goal("pillow", None, "sofa", 2)),
    ("put two creditcard in armchair.", Goal("creditcard", None, "armchair", 2)),
    ("examine the book with the desklamp.", Goal("book", "light", None, 1)),
    ("look at cd under the desklamp.", Goal("cd", "light", None, 1)),
])
def test_goals_are_read_from_alfworlds_templates(objective: str, goal: Goal) -> None:
    assert Goal.parse(objective) == goal


def test_an_objective_outside_the_templates_is_a_one_line_error() -> None:
    with pytest.raises(ValueError, match="'dance with the lamp.' fits no ALFWorld goal template"):
        Goal.parse("dance with the lamp.")


SEEN = ("go to toilet 1", "You arrive at toilet 1. On the toilet 1, you see a candle 3, and a soapbar 3.")
TAKE_OTHER = ("take soapbar 3 from toilet 1", "You pick up the soapbar 3 from the toilet 1.")
TAKE = ("take candle 3 from toilet 1", "You pick up the candle 3 from the toilet 1.")
PLACE = ("move candle 3 to cabinet 1", "You move the candle 3 to the cabinet 1.")


def test_a_loss_stops_at_the_first_step_never_completed() -> None:
    two = Goal("candle", None, "cabinet", 2)
    elsewhere = ("go to cabinet 1", "You arrive at cabinet 1. The cabinet 1 is closed.")
    assert goal_reach(two, [elsewhere]).stage == "target never seen"
    assert goal_reach(two, [SEEN, TAKE_OTHER]) == GoalReach("seen, not taken", True, 1)
    assert goal_reach(two, [SEEN, TAKE]).stage == "not placed"
    assert goal_reach(two, [SEEN, TAKE, elsewhere, PLACE]) == GoalReach("one of two placed", False, 2)
    assert goal_reach(two, [SEEN, TAKE, elsewhere, PLACE, SEEN, TAKE, PLACE]).stage == "one of two placed"  # same one
    assert goal_reach(Goal("candle", "heat", "cabinet", 1), [SEEN, TAKE, PLACE]).stage == "taken, not heated"
    failed_take = ("take candle 3 from toilet 1", "Nothing happens.")
    assert goal_reach(two, [SEEN, failed_take]).stage == "seen, not taken"


def test_a_lamp_lights_the_goal_only_once_the_object_is_held() -> None:
    light = Goal("candle", "light", None, 1)
    lamp = ("use desklamp 1", "You turn on the desklamp 1.")
    assert goal_reach(light, [SEEN, lamp]).stage == "seen, not taken"
    assert goal_reach(light, [SEEN, TAKE]).stage == "taken, not lit"
    assert goal_reach(light, [SEEN, TAKE, lamp]).stage == "every step done"


def test_progress_is_the_stage_reached_among_the_goals_stages() -> None:
    two = Goal("candle", None, "cabinet", 2)
    assert two.stages() == ("target never seen", "seen, not taken", "not placed", "one of two placed",
                            "every step done")
    assert Goal("egg", "heat", "fridge", 1).stages()[2:] == ("taken, not heated", "not placed", "every step done")
    assert [goal_progress(two, goal_reach(two, turns)) for turns in ([], [SEEN], [SEEN, TAKE], [SEEN, TAKE, PLACE])] \
        == [0.0, 0.25, 0.5, 0.75]
    other = ("take candle 4 from toilet 1", "You pick up the candle 4 from the toilet 1.")
    second = ("move candle 4 to cabinet 1", "You move the candle 4 to the cabinet 1.")
    assert goal_progress(two, goal_reach(two, [SEEN, TAKE, PLACE, other, second])) == 1.0


def _cut_copy(wh: Warehouse, policy: str) -> dict[str, str]:
    """Each won expert episode stored again as ``policy``'s, lost and cut just before its last placing or lamp turn;
    returns the stage each game must then show."""
    expected = {}
    episodes = wh.con.execute("SELECT episode_id, game_id, task_type FROM episodes WHERE teacher = 'expert' AND won"
                              ).fetchall()
    for episode_id, game_id, task_type in episodes:
        verb = "use " if task_type == "look_at_obj_in_light" else "move "
        (cut,) = wh.con.execute("SELECT max(t) FROM steps WHERE episode_id = ? AND kind = 'env' AND starts_with("
                                "action, ?)", [episode_id, verb]).fetchone()
        copy = episode_id + policy
        wh.con.execute("INSERT INTO episodes SELECT * REPLACE (? AS episode_id, ? AS teacher, false AS won) FROM "
                       "episodes WHERE episode_id = ?", [copy, policy, episode_id])
        wh.con.execute("INSERT INTO steps SELECT * REPLACE (? AS episode_id) FROM steps WHERE episode_id = ? AND t < "
                       "?", [copy, episode_id, cut])
        expected[game_id] = {"look_at_obj_in_light": "taken, not lit",
                             "pick_two_obj_and_place": "one of two placed"}.get(task_type, "not placed")
    return expected


@pytest.fixture(scope="module")
def cut_db(tmp_path_factory: pytest.TempPathFactory, alfworld_data: Path) -> tuple[Path, dict[str, str]]:
    db = tmp_path_factory.mktemp("losses") / "w.duckdb"
    with Warehouse(db) as wh:
        collect(CollectionConfig(split="dev", limit=18, workers=0, engine="fast"), wh, run_id="test")
        expected = _cut_copy(wh, "cut")
    return db, expected


def test_expert_episodes_cut_short_stop_where_they_were_cut(cut_db: tuple[Path, dict[str, str]]) -> None:
    db, expected = cut_db
    with Warehouse(db, read_only=True) as wh:
        lost = lost_games(wh, "cut", "dev")
        expert_lost = wh.con.execute("SELECT count(*) FROM episodes WHERE teacher = 'expert' AND NOT won").fetchone()
        assert len(lost_games(wh, "expert", "dev")) == expert_lost[0]
    assert {game.game_id: game.reach.stage for game in lost} == expected
    assert len(set(expected.values())) >= 2, "the games drawn should cover more than one stage"
    assert not any(game.reach.took_other_object for game in lost)
    table = loss_table(lost)
    assert table[-1][0] == "all" and table[-1][7] == len(expected) and table[-1][8] == "100%"
    assert sum(row[7] for row in table[:-1]) == len(expected)


def test_loss_table_has_no_rows_without_losses() -> None:
    assert loss_table([]) == []
    lost = [LostGame("e", "g", "pick_two_obj_and_place", 4, True, goal_reach(Goal("candle", None, "cabinet", 2), [SEEN]))]
    assert loss_table(lost)[0][:8] == ("seen, not taken", 0, 0, 0, 0, 0, 1, 1)


def test_cli_prints_where_a_policys_lost_games_stopped(cut_db: tuple[Path, dict[str, str]]) -> None:
    from typer.testing import CliRunner

    from evoharness_cli.cli import app

    db, expected = cut_db
    shown = CliRunner().invoke(app, ["--format", "json", "losses", "cut", "--db", str(db)])
    assert shown.exit_code == 0, shown.output
    table = json.loads(shown.stdout.splitlines()[-1])
    assert table["rows"][-1][:1] == ["all"] and table["rows"][-1][7] == len(expected)
    none = CliRunner().invoke(app, ["losses", "cut", "--max-steps", "50", "--db", str(db)])
    assert none.exit_code == 2 and "'cut' lost no game it finished on dev at 50 steps" in none.output


def test_a_students_json_row_says_where_its_lost_games_stopped(cut_db: tuple[Path, dict[str, str]],
                                                              students: ModuleType) -> None:
    db, expected = cut_db
    row = students.played(str(db), "cut", "dev")
    assert row["success"] == 0.0 and row["lost_by_stage"] == dict(Counter(expected.values()))
    assert list(row["lost_by_stage"]) == [stage for stage in STAGE_ORDER if stage in row["lost_by_stage"]]
