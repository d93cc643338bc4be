"""ALFWorld env without TextWorld: ALFWorld's naming rule, the game generator, real-data discovery, and the env's
RAGEN behaviour (observation format, admissible-action validity, reward, step cap) over a stand-in engine."""

import json
import sys

import pytest

from envs.alfworld.data import find_games
from envs.alfworld.env import INSTRUCTION, AlfworldEnv, format_observation
from envs.alfworld.generator import TASK_TYPES, generate_game, make_scene
from envs.alfworld.names import display_names
from envs.registry import make


def test_display_names_follow_alfworlds_demangler():
    ids = ["apple_bar__minus_00_dot_47_bar__plus_01_dot_15", "apple_bar__plus_00_dot_10_bar__plus_01_dot_00",
           "cabinet_bar_2", "sink_bar__minus_01_dot_99_bar_sinkbasin", "agent1", "loc_bar__minus_3_bar_0"]
    assert display_names(ids) == {
        "apple_bar__minus_00_dot_47_bar__plus_01_dot_15": "apple 2",  # first in sorted order: highest number
        "apple_bar__plus_00_dot_10_bar__plus_01_dot_00": "apple 1",
        "cabinet_bar_2": "cabinet 1",
        "sink_bar__minus_01_dot_99_bar_sinkbasin": "sinkbasin 1",
        "agent1": "agent1 ",
        "loc_bar__minus_3_bar_0": "loc 1",
    }


def test_generated_games_are_seeded_and_within_task_types():
    assert generate_game(7) == generate_game(7)
    assert generate_game(7)["pddl_problem"] != generate_game(8)["pddl_problem"]
    seen = {generate_game(seed, (3, 6))["task_type"] for seed in range(40)}
    assert seen == {TASK_TYPES[3], TASK_TYPES[6]}
    with pytest.raises(ValueError, match="task-type ids"):
        generate_game(0, (7,))


@pytest.mark.parametrize("seed", range(30))
def test_scenes_start_unsolved_and_walkthroughs_use_their_objects(seed):
    scene = make_scene(seed)
    game = generate_game(seed)
    walk = game["walkthrough"]
    target_kind = scene.objects[scene.targets[0]]
    assert f"Your task is to: {scene.goal}." in game["grammar"] and target_kind in scene.goal
    if scene.goal_receptacle is not None:  # no object of the goal's kind starts in a receptacle of the goal's kind
        goal_kind = scene.receptacles[scene.goal_receptacle]
        assert all(scene.receptacles[scene.placed[o]] != goal_kind for o, k in scene.objects.items() if k == target_kind)
        assert walk[-1].startswith(f"move {target_kind} ") and walk[-1].endswith(f" to {goal_kind} " +
                                                                                  walk[-1].rsplit(" ", 1)[1])
    else:
        assert walk[-1] == "use desklamp 1"
    takes = [c for c in walk if c.startswith("take ")]
    assert len(takes) == (2 if scene.task_type == "pick_two_obj_and_place" else 1)
    verb = {"pick_clean_then_place_in_recep": "clean", "pick_heat_then_place_in_recep": "heat",
            "pick_cool_then_place_in_recep": "cool"}.get(scene.task_type)
    assert any(c.startswith(f"{verb} ") for c in walk) == (verb is not None)
    assert all(a != b for a, b in zip(walk, walk[1:]))  # never "go to" where the agent already is


class StandInBackend:
    """A two-command game: "open box" then "take key from box" wins; anything else changes nothing."""

    def load(self, game):
        self.game, self.opened = game, False

    def reset(self):
        return "You see a box 1.", ["look", "open box 1"]

    def step(self, command):
        if command == "open box 1" and not self.opened:
            self.opened = True
            return "The box 1 is open.", False, ["look", "take key 1 from box 1"]
        if command == "take key 1 from box 1" and self.opened:
            return "You take the key 1.", True, ["look"]
        return "Nothing happens.", False, ["look", "take key 1 from box 1"] if self.opened else ["look", "open box 1"]


def test_env_formats_ragens_observation_and_scores_admissible_commands():
    env = AlfworldEnv(backend=StandInBackend, max_steps=4)
    obs, info = env.reset(3)
    assert obs == "You see a box 1.\n\nAdmissible actions: [look, open box 1]"
    assert info["game"] == "generated:3" and env.backend.game == generate_game(3)
    assert env.step("dance") == ("Nothing happens.\n\nAdmissible actions: [look, open box 1]", 0.0, False, False,
                                 {"action_is_valid": False, "action_is_effective": False, "success": False})
    assert env.step(" open box 1 ")[4]["action_is_valid"] is True
    obs, reward, terminated, truncated, info = env.step("take key 1 from box 1")
    assert (reward, terminated, truncated, info["success"]) == (10.0, True, False, True)
    assert env.instruction() == INSTRUCTION and format_observation("x", []) == "x\n\nAdmissible actions: []"


def test_env_truncates_after_max_steps():
    env = AlfworldEnv(backend=StandInBackend, max_steps=2, score=1.0)
    env.reset(0)
    assert env.step("look")[2:4] == (False, False)
    assert env.step("look")[2:4] == (False, True)


def _trial(root, split, task, trial, task_type, solvable=True):
    folder = root / "json_2.1.1" / split / task / trial
    folder.mkdir(parents=True)
    (folder / "traj_data.json").write_text(json.dumps({"task_type": task_type}))
    (folder / "game.tw-pddl").write_text(json.dumps({"solvable": solvable}))
    return str(folder / "game.tw-pddl")


def test_real_data_games_are_found_and_filtered_as_alfworld_does(tmp_path):
    keep = [_trial(tmp_path, "train", "pick_and_place_simple-Apple-None-Fridge-1", "trial_b", TASK_TYPES[1]),
            _trial(tmp_path, "train", "pick_and_place_simple-Apple-None-Fridge-1", "trial_a", TASK_TYPES[1]),
            _trial(tmp_path, "train", "look_at_obj_in_light-Book-None-DeskLamp-2", "trial_c", TASK_TYPES[2])]
    _trial(tmp_path, "train", "pick_and_place_simple-Apple-None-Fridge-1", "trial_d", TASK_TYPES[1], solvable=False)
    _trial(tmp_path, "train", "pick_and_place_simple-AppleSliced-None-Fridge-1", "trial_e", TASK_TYPES[1])
    _trial(tmp_path, "train", "pick_and_place_with_movable_recep-Pen-Bowl-Desk-1", "trial_f", TASK_TYPES[1])
    _trial(tmp_path, "valid_unseen", "pick_heat_then_place_in_recep-Egg-None-Fridge-9", "trial_g", TASK_TYPES[4])
    assert find_games(str(tmp_path), "train", tuple(TASK_TYPES)) == tuple(sorted(keep))
    assert find_games(str(tmp_path), "train", (2,)) == (keep[2],)
    env = make("AlfworldOOD", data_dir=str(tmp_path), split="val", backend=StandInBackend)
    env.reset(5)
    assert env.backend.game.endswith("trial_g/game.tw-pddl")
    env = AlfworldEnv(data_dir=str(tmp_path / "json_2.1.1"), backend=StandInBackend)  # the json_2.1.1 folder works too
    for seed in range(4):
        env.reset(seed)
        assert env.backend.game == sorted(keep)[seed % 3]  # RAGEN: game seed % n


def test_missing_or_empty_data_names_the_layout(tmp_path):
    with pytest.raises(FileNotFoundError, match=r"does not exist.*json_2.1.1/\{train,valid_seen,valid_unseen\}"):
        AlfworldEnv(data_dir=str(tmp_path / "nowhere"), backend=StandInBackend)
    (tmp_path / "json_2.1.1" / "valid_seen").mkdir(parents=True)
    with pytest.raises(FileNotFoundError, match="has no train split folder"):
        AlfworldEnv(data_dir=str(tmp_path), backend=StandInBackend)
    with pytest.raises(FileNotFoundError, match="No playable ALFWorld game"):
        AlfworldEnv(data_dir=str(tmp_path), split="val", backend=StandInBackend)


def test_arguments_and_ragen_keys_are_checked():
    with pytest.raises(ValueError, match="split must be 'train' or 'val'"):
        AlfworldEnv(split="test", backend=StandInBackend)
    with pytest.raises(ValueError, match="task-type ids"):
        AlfworldEnv(task_types=[0], backend=StandInBackend)
    with pytest.raises(ValueError, match="config_file.*data_dir"):
        make("Alfworld", config_file="alfworld_config.yaml", backend=StandInBackend)
    assert make("Alfworld", render_mode="text", backend=StandInBackend).split_name == "train"


def test_missing_textworld_names_the_install_command(monkeypatch):
    monkeypatch.setitem(sys.modules, "fast_downward", None)
    with pytest.raises(ImportError, match=r'pip install "textworld\[pddl\]==1.7.0"'):
        AlfworldEnv()


def test_config_variants_validate():
    from configs.alfworld import get_config
    from ragen_jax.config import validate_config

    tiny = get_config("tiny")
    validate_config(tiny)
    assert (tiny.env.name, tiny.env.max_actions_per_traj, tiny.val.env_kwargs.split) == ("Alfworld", 50, "val")
    assert get_config("ood").val.name == "AlfworldOOD"
    validate_config(get_config("tiny,ood"))
