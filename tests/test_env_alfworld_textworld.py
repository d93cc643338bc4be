"""ALFWorld env on TextWorld's PDDL engine (needs the optional textworld[pddl]; skipped without it): a hand-made
game in ALFWorld's file layout and naming, and generated games of every task type solved by their walkthroughs."""

import json
import sys

import pytest

pytest.importorskip("fast_downward")
pytest.importorskip("textworld")

from envs.alfworld.env import AlfworldEnv  # noqa: E402
from envs.alfworld.generator import TASK_TYPES, generate_game  # noqa: E402
from envs.alfworld.logic import DOMAIN, GRAMMAR, TASK_PLACEHOLDER  # noqa: E402

APPLE = "apple_bar__minus_00_dot_47_bar__plus_01_dot_15_bar__plus_00_dot_48"
FRIDGE = "fridge_bar__minus_02_dot_10_bar__plus_00_dot_00_bar__plus_01_dot_07"
TABLE = "diningtable_bar__plus_00_dot_62_bar__plus_00_dot_00_bar__plus_00_dot_77"
PROBLEM = f"""(define (problem trial)
  (:domain household)
  (:objects agent1 - agent
    loc_bar_0 loc_bar__minus_8_bar_1 loc_bar_3_bar_2 - location
    {FRIDGE} {TABLE} - receptacle
    {APPLE} - object
    appletype - otype
    fridgetype diningtabletype - rtype)
  (:init (atlocation agent1 loc_bar_0)
    (receptacleatlocation {FRIDGE} loc_bar__minus_8_bar_1) (receptacleatlocation {TABLE} loc_bar_3_bar_2)
    (openable {FRIDGE}) (cools {FRIDGE}) (receptacletype {FRIDGE} fridgetype) (receptacletype {TABLE} diningtabletype)
    (inreceptacle {APPLE} {FRIDGE}) (objecttype {APPLE} appletype))
  (:goal (exists (?o - object ?r - receptacle) (and (objecttype ?o appletype) (receptacletype ?r diningtabletype)
    (inreceptacle ?o ?r)))))
"""


def write_trial(root):
    """One ALFWorld trial folder (json_2.1.1/train/<task>/<trial>/) holding a hand-made game."""
    folder = root / "json_2.1.1" / "train" / "pick_and_place_simple-Apple-None-DiningTable-1" / "trial_T0"
    folder.mkdir(parents=True)
    (folder / "traj_data.json").write_text(json.dumps({"task_type": "pick_and_place_simple"}))
    game = {"pddl_domain": DOMAIN, "grammar": GRAMMAR.replace(TASK_PLACEHOLDER, "put some apple on diningtable"),
            "pddl_problem": PROBLEM, "solvable": True}
    (folder / "game.tw-pddl").write_text(json.dumps(game))


def test_a_hand_made_alfworld_game_file_plays_with_alfworld_names(tmp_path):
    write_trial(tmp_path)
    argv = list(sys.argv)
    env = AlfworldEnv(data_dir=str(tmp_path))
    obs, info = env.reset(10000)
    assert info["game"].endswith("trial_T0/game.tw-pddl")
    assert "you see a diningtable 1, and a fridge 1." in obs
    assert "Your task is to: put some apple on diningtable." in obs
    assert obs.endswith("Admissible actions: [go to diningtable 1, go to fridge 1, inventory, look]")
    obs, reward, done, truncated, info = env.step("take apple 1 from fridge 1")  # not admissible yet
    assert obs.startswith("Nothing happens.") and (reward, done, info["action_is_valid"]) == (0.0, False, False)
    seen = {}
    for command in ("go to fridge 1", "open fridge 1", "take apple 1 from fridge 1", "go to diningtable 1"):
        seen[command], reward, done, truncated, info = env.step(command)
        assert info["action_is_valid"] and not done, (command, seen[command])
    assert seen["go to fridge 1"].startswith("You walk over to the fridge 1. The fridge 1 is closed.")
    assert seen["open fridge 1"].startswith("You open the fridge 1. The fridge 1 is open. Inside it, you see a apple 1.")
    obs, reward, done, truncated, info = env.step("move apple 1 to diningtable 1")
    assert (reward, done, truncated, info["success"]) == (10.0, True, False, True)
    assert obs.startswith("You put the apple 1 on the diningtable 1.")
    assert sys.argv == argv  # Fast Downward's translator overwrites sys.argv; the backend puts it back


@pytest.mark.slow
@pytest.mark.parametrize("task_type", sorted(TASK_TYPES))
def test_generated_games_of_each_task_type_are_won_by_their_walkthrough(task_type):
    env = AlfworldEnv(task_types=[task_type])
    for seed in range(3):
        env.reset(seed)
        walkthrough = generate_game(seed, (task_type,))["walkthrough"]
        for i, command in enumerate(walkthrough):
            assert command in env.admissible, (seed, command, env.admissible)
            _, reward, done, _, info = env.step(command)
            assert done == (i == len(walkthrough) - 1) and info["action_is_valid"]
        assert reward == 10.0 and info["success"]


@pytest.mark.slow
def test_tiny_eval_end_to_end(tmp_path):
    """configs/alfworld.py:tiny under `--mode=eval` (test_configs_eval's in-process harness) on generated games."""
    from test_configs_eval import check_eval_output, run_tiny_eval, tiny_eval_config

    cfg = tiny_eval_config("alfworld")
    metrics, records = run_tiny_eval(cfg, tmp_path)
    check_eval_output(metrics, records, "Alfworld", cfg)
    assert metrics["val/Alfworld/env_error"] == 0.0
    assert all("Admissible actions: [" in r["messages"][1]["content"] for r in records)
