"""Sokoban: transitions and rewards on hand-built levels, generation, oracle, renders, gymnax API."""

import importlib.util
import os
import sys
import types

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from envs import registry
from envs.sokoban import Sokoban, oracle_actions, solve
from envs.sokoban import generator, levels
from envs.sokoban.env import step_level

KEY = jax.random.PRNGKey(0)
UP, DOWN, LEFT, RIGHT = 0, 1, 2, 3


@pytest.fixture(scope="module")
def env():
    return Sokoban(bank_size=32, use_cache=False)


_STEPS: dict = {}


def _jitted_step(env):
    if id(env) not in _STEPS:
        _STEPS[id(env)] = (env, jax.jit(env.step_env))
    return _STEPS[id(env)][1]


def play(env, state, actions):
    """Apply actions with step_env; returns (state, rewards, terminated flags, infos)."""
    rewards, terms, infos = [], [], []
    step = _jitted_step(env)
    for a in actions:
        _, state, r, t, info = step(KEY, state, jnp.int32(a), env.default_params)
        rewards.append(float(r))
        terms.append(bool(t))
        infos.append({k: bool(v) for k, v in info.items()})
    return state, rewards, terms, infos


def test_move_push_and_solve_rewards(env):
    state = env.state_from_grid("#######\n#P_X_O#\n#######")
    state, rewards, terms, infos = play(env, state, [RIGHT, RIGHT, RIGHT])
    assert rewards[:2] == pytest.approx([-0.1, -0.1])
    assert rewards[2] == pytest.approx(10.9, abs=1e-5)
    assert terms == [False, False, True]
    assert [i["action_is_effective"] for i in infos] == [True, True, True]
    assert infos[-1]["success"] and not infos[0]["success"]
    assert env.render_text(state) == "#######\n#___P√#\n#######"


def test_push_into_wall_and_box_does_nothing(env):
    for grid in ("#####\n#PX##\n#O###\n#####", "######\n#PXX_#\n#O___#\n######"):
        state = env.state_from_grid(grid)
        new, rewards, terms, infos = play(env, state, [RIGHT])
        assert rewards == pytest.approx([-0.1]) and terms == [False]
        assert not infos[0]["action_is_effective"]
        np.testing.assert_array_equal(new.room, state.room)
        # a walk into a wall is also a no-op
        _, _, _, infos = play(env, state, [LEFT])
        assert not infos[0]["action_is_effective"]


def test_box_off_target_penalty_and_back_on(env):
    state = env.state_from_grid("########\n#P√__XO#\n########")
    assert int(state.boxes_on_target) == 1
    state, rewards, _, _ = play(env, state, [RIGHT])
    assert rewards == pytest.approx([-1.1])
    assert env.render_text(state) == "########\n#_SX_XO#\n########"
    # the second box onto its target: +1 but not solved (the first target is empty)
    state = env.state_from_grid("########\n#O__PXO#\n########")
    state, rewards, terms, _ = play(env, state, [RIGHT])
    assert rewards == pytest.approx([0.9]) and terms == [False]


def test_reference_solve_render_and_reward(env):
    state = env.state_from_grid("######\n######\n#O####\n#X####\n#P_###\n######")
    state, rewards, terms, infos = play(env, state, [UP])
    assert env.render_text(state) == "######\n######\n#√####\n#P####\n#__###\n######"
    assert rewards[0] == pytest.approx(10.9, abs=1e-5) and terms == [True] and infos[0]["success"]


def test_reference_coordinate_render():
    env = Sokoban(render_mode="grid_coord", bank_size=1, use_cache=False)
    grid = "######\n#____#\n#_O_P#\n#__X_#\n#____#\n######"
    state = env.state_from_grid(grid)
    expected = ("Coordinates: \nBoard size: 6 rows x 6 cols (zero-indexed).\nTargets: (2, 2)\nBoxes: (3, 3)\n"
                "Player: (2, 4)\nGrid Map: \n" + grid)
    assert env.render_text(state) == expected


def test_different_grid_vocab_and_legend():
    env = registry.make("SokobanDifferentGridVocab", bank_size=1, use_cache=False)
    state = env.state_from_grid("WWWWW\nWA.BW\nWG..W\nWWWWW")
    assert env.render_text(state) == "WWWWW\nWA.BW\nWG..W\nWWWWW"
    assert env.legend() == ("\nThe meaning of each symbol in the state is:\nW: wall, .: empty, G: target, "
                            "C: box on target, B: box, A: player, @: player on target")
    assert Sokoban(bank_size=1, use_cache=False).legend().endswith(
        "#: wall, _: empty, O: target, √: box on target, X: box, P: player, S: player on target")


def test_step_cap_truncates_at_100_via_gymnax(env):
    state = env.state_from_grid("######\n#PX###\n#O___#\n#____#\n#____#\n######")  # bank shape (6, 6)
    step = jax.jit(env.step)
    for t in range(100):
        _, new_state, reward, terminated, truncated, info = step(KEY, state, jnp.int32(RIGHT))
        assert not bool(terminated)
        assert bool(truncated) == (t == 99)
        state = new_state
    assert bool(info["truncated"]) and not bool(info["terminated"])


def test_generated_levels_solvable_and_deterministic():
    env = registry.make("SimpleSokoban", use_cache=False, bank_size=1)
    seeds = list(range(120))
    batch = env.reset_from_seeds(seeds)
    again = env.reset_from_seeds(seeds)
    np.testing.assert_array_equal(batch.room, again.room)
    assert len({np.asarray(r).tobytes() for r in batch.room}) > 100  # seeds give different levels
    for i in range(len(seeds)):
        state = jax.tree.map(lambda x: x[i], batch)
        plan = oracle_actions(env, state)
        assert plan, f"seed {seeds[i]} unsolvable or already solved"
        final, rewards, terms, _ = play(env, state, plan)
        assert terms[-1] and rewards[-1] == pytest.approx(10.9, abs=1e-5)
        assert int((np.asarray(state.room) == generator.PLAYER).sum()) == 1


def test_larger_sokoban_levels_solvable():
    env = registry.make("LargerSokoban", use_cache=False, bank_size=1)
    batch = env.reset_from_seeds(range(40))
    assert batch.room.shape == (40, 8, 8)
    for i in range(40):
        fixed, room = np.asarray(batch.fixed[i]), np.asarray(batch.room[i])
        assert (room == generator.BOX).sum() == 2 and (fixed == generator.TARGET).sum() == 2
        assert solve(fixed, room)


def test_oracle_reports_unsolvable():
    env = Sokoban(bank_size=1, use_cache=False)
    state = env.state_from_grid("######\n#P_O_#\n##X###\n######")  # box walled in below and beside
    assert solve(state.fixed, state.room) is None
    simple = env.state_from_grid("#####\n#PXO#\n#####")
    assert solve(simple.fixed, simple.room) == [RIGHT]


def test_gymnax_api_reset_step_autoreset(env):
    params = env.default_params
    obs, state = env.reset(KEY, params)
    assert obs.shape == (6, 6) and env.action_space(params).contains(jnp.int32(3))
    plan = env.oracle_actions(state)
    for i, a in enumerate(plan):
        obs, state, reward, terminated, truncated, info = env.step(jax.random.PRNGKey(i), state, a, params)
    assert bool(terminated) and not bool(truncated)
    assert set(info) >= {"terminated", "truncated", "final_observation", "success", "action_is_effective"}
    assert int(state.time) == 0  # auto-reset to a fresh bank level
    # seed_to_key gives the same episode every time
    o1, s1 = env.reset(env.seed_to_key(5), params)
    o2, s2 = env.reset(env.seed_to_key(5), params)
    np.testing.assert_array_equal(o1, o2)


def test_vmapped_step_equals_single_steps(env):
    batch = env.reset_from_seeds(range(16))
    actions = jax.random.randint(KEY, (16,), 0, 4)
    vstep = jax.jit(jax.vmap(step_level))(batch, actions)
    single_step = jax.jit(step_level)
    for i in range(16):
        single = single_step(jax.tree.map(lambda x: x[i], batch), actions[i])
        for a, b in zip(jax.tree.leaves(single), jax.tree.leaves(jax.tree.map(lambda x: x[i], vstep))):
            np.testing.assert_array_equal(a, b)


def test_level_bank_disk_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("RAGEN_JAX_CACHE", str(tmp_path))
    cfg = generator.GeneratorConfig((6, 6), 1, 300)
    fixed, room = levels.load_bank(cfg, 10, 8)
    files = list((tmp_path / "sokoban").glob("*.npz"))
    assert len(files) == 1 and "_10_8.npz" in files[0].name
    fixed2, room2 = levels.load_bank(cfg, 10, 8)
    np.testing.assert_array_equal(room, room2)
    np.testing.assert_array_equal(room[3], generator.generate_level(13, cfg)[1])


def _import_gym_sokoban():
    spec = importlib.util.find_spec("gym_sokoban")
    if spec is None:
        pytest.skip("gym-sokoban not installed (requirements-test.txt pins it: make install-test)")
    if "pkg_resources" not in sys.modules:  # gym-sokoban imports pkg_resources, gone from new setuptools
        stub = types.ModuleType("pkg_resources")
        stub.resource_filename = lambda pkg, path: os.path.join(
            os.path.dirname(importlib.util.find_spec(pkg).origin), path)
        sys.modules["pkg_resources"] = stub
    from gym_sokoban.envs import room_utils, sokoban_env  # installed but broken: a failure, not a skip

    return room_utils, sokoban_env


# RAGEN's levels, recorded by running its ragen/env/sokoban/utils.py generate_room (mll-lab-nu/RAGEN at
# 20daedc) under all_seed(seed) with the arguments SokobanEnv.reset passes (num_steps = int(1.7 * (rows +
# cols)), as gym-sokoban sets it). Rows joined by "/", cells as gym-sokoban codes: 0 wall, 1 floor,
# 2 target, 4 box, 5 player. seed: (room_fixed, room_state).
RAGEN_SIMPLE_LEVELS = {  # SimpleSokoban: 6x6, 1 box, search_depth 300
    0: ("000000/011110/002110/000110/000110/000000", "000000/011110/002150/000410/000110/000000"),
    1: ("000000/021000/010000/011000/011000/000000", "000000/021000/010000/041000/051000/000000"),
    7: ("000000/001110/001110/000120/000110/000000", "000000/001110/005410/000120/000110/000000"),
    42: ("000000/011120/011110/000000/000000/000000", "000000/054120/011110/000000/000000/000000"),
    199: ("000000/011110/011100/021100/011100/000000", "000000/015110/014100/021100/011100/000000"),
    12345: ("000000/011110/011210/000110/000010/000000", "000000/011110/054210/000110/000010/000000"),
    2**31 - 1: ("000000/011100/011110/011110/011120/000000", "000000/011100/054110/011110/011120/000000"),
    2**32 - 1: ("000000/010000/012110/011110/011000/000000", "000000/010000/012150/011410/011000/000000"),
}
RAGEN_LARGER_LEVELS = {  # LargerSokoban: 8x8, 2 boxes, search_depth 10
    0: ("00000000/00002100/00011100/00011000/00111100/01111000/01211000/00000000",
        "00000000/00002100/00011100/00011000/00114100/01411000/01511000/00000000"),
    3: ("00000000/00210000/00110000/01110000/01121110/01111110/01100000/00000000",
        "00000000/00210000/00110000/01140000/01121110/01411110/01500000/00000000"),
    1000: ("00000000/00000000/01101110/01121110/01111110/01111110/01210000/00000000",
           "00000000/00000000/01101110/01121110/01141110/01114150/01210000/00000000"),
    99999: ("00000000/00100000/00100000/00110110/01111110/00012110/00000120/00000000",
            "00000000/00100000/00100000/00110510/01111410/00012140/00000120/00000000"),
}
# Seeds whose first generation fails in RAGEN (it then retries with Python's salted hash of the seed).
RAGEN_LARGER_FAILED_SEEDS = (24, 37, 38, 66)


def _grid(text):
    return np.array([[int(c) for c in row] for row in text.split("/")], np.int8)


@pytest.mark.parametrize("name,recorded", [("SimpleSokoban", RAGEN_SIMPLE_LEVELS),
                                           ("LargerSokoban", RAGEN_LARGER_LEVELS)])
def test_reset_from_seeds_gives_ragens_recorded_level(name, recorded):
    env = registry.make(name, use_cache=False, bank_size=1)
    batch = env.reset_from_seeds(list(recorded))
    for i, (seed, (fixed, room)) in enumerate(recorded.items()):
        np.testing.assert_array_equal(np.asarray(batch.fixed[i]), _grid(fixed), err_msg=f"{name} seed {seed}")
        np.testing.assert_array_equal(np.asarray(batch.room[i]), _grid(room), err_msg=f"{name} seed {seed}")


def test_generation_fails_for_the_seeds_ragen_fails_on():
    cfg = registry.make("LargerSokoban", use_cache=False, bank_size=1).config
    for seed in RAGEN_LARGER_FAILED_SEEDS:
        with pytest.raises(generator.GenerationFailed):
            generator.generate_room(seed, cfg)
    for seed in RAGEN_LARGER_LEVELS:
        fixed, room = generator.generate_room(seed, cfg)
        np.testing.assert_array_equal(room, _grid(RAGEN_LARGER_LEVELS[seed][1]))


def test_step_matches_gym_sokoban(env):
    _, sokoban_env = _import_gym_sokoban()
    theirs = sokoban_env.SokobanEnv(dim_room=(6, 6), num_boxes=1, max_steps=100, reset=False)
    rng = np.random.default_rng(0)
    step = _jitted_step(env)
    batch = env.reset_from_seeds(range(10))
    for i in range(10):
        state = jax.tree.map(lambda x: x[i], batch)
        theirs.room_fixed, theirs.room_state = np.asarray(state.fixed).astype(int), np.asarray(state.room).astype(int)
        theirs.player_position = np.argwhere(theirs.room_state == 5)[0]
        theirs.num_env_steps, theirs.boxes_on_target, theirs.reward_last = 0, 0, 0
        for a in rng.integers(0, 4, 60):
            _, r_theirs, done, _ = theirs.step(int(a) + 1, observation_mode="tiny_rgb_array")
            _, state, r_ours, term, _ = step(KEY, state, jnp.int32(a), env.default_params)
            assert float(r_ours) == pytest.approx(r_theirs, abs=1e-5)
            np.testing.assert_array_equal(np.asarray(state.room), theirs.room_state)
            if done:
                break


def test_generation_retries_until_a_crowded_room_succeeds():
    """6x6 rooms with 5 boxes fail ~96% of seeds; RAGEN retries until one works, so a seed needing more
    than 100 retries (84 needs 107) must still give a level, not stop the run."""
    cfg = generator.GeneratorConfig((6, 6), 5, 300)
    fixed, room = generator.generate_level(84, cfg)
    assert np.sum(fixed == generator.TARGET) == 5 and np.sum(room == generator.BOX) == 5
    assert np.sum(room == generator.PLAYER) == 1 and not np.any(room == generator.BOX_ON_TARGET)


@pytest.mark.parametrize("kwargs,match", [({"dim_room": (2, 6)}, "dim_room"), ({"num_boxes": 0}, "num_boxes"),
                                          ({"search_depth": 2}, "search_depth")])
def test_generator_config_rejects_settings_that_can_never_make_a_level(kwargs, match):
    # These hung (a 1-row room), or retried every seed in vain, or raised an IndexError from the search.
    with pytest.raises(ValueError, match=match):
        generator.GeneratorConfig(**kwargs)
    with pytest.raises(ValueError, match=match):
        Sokoban(bank_size=1, use_cache=False, **kwargs)


@pytest.mark.parametrize("damage", ["truncated", "empty", "wrong_shape"])
def test_level_bank_regenerates_a_damaged_cache_file(tmp_path, monkeypatch, damage):
    """A cut-short copy, an empty file or a bank of the wrong size is regenerated, not raised into the run."""
    monkeypatch.setenv("RAGEN_JAX_CACHE", str(tmp_path))
    cfg = generator.GeneratorConfig((6, 6), 1, 300)
    fixed, room = levels.load_bank(cfg, 0, 4)
    (path,) = (tmp_path / "sokoban").glob("*.npz")
    if damage == "wrong_shape":
        np.savez(path, fixed=fixed[:2], room=room[:2])
    else:
        path.write_bytes(path.read_bytes()[: path.stat().st_size // 2] if damage == "truncated" else b"")
    fixed2, room2 = levels.load_bank(cfg, 0, 4)
    np.testing.assert_array_equal(fixed2, fixed)
    np.testing.assert_array_equal(room2, room)
    with np.load(path) as data:  # and the file is repaired
        np.testing.assert_array_equal(data["room"], room)
    assert [p.name for p in (tmp_path / "sokoban").iterdir()] == [path.name]


@pytest.mark.parametrize("grid,match", [
    ("#####\n#P X#\n#O###\n#####", r"unknown symbol ' ' at row 1, col 2"),
    ("#####\n#_X_#\n#O###\n#####", "no player"),
    ("#####\n#PXP#\n#O###\n#####", "2 players"),
    ("#####\n#PX#\n#O###\n#####", "row 1 has 4 cells"),
])
def test_state_from_grid_names_what_is_wrong_with_a_hand_built_level(env, grid, match):
    # A typo raised a bare KeyError: ' ', a missing player silently stood at (0, 0) on a wall.
    with pytest.raises(ValueError, match=match):
        env.state_from_grid(grid)


# RAGEN's env_instruction of its named Sokoban configs (config/envs.yaml): what its users see.
RAGEN_GRID_INSTRUCTION = (
    "You are solving the Sokoban puzzle. \nYou are the player and you need to push all boxes to targets. \n"
    "When you are right next to a box, you can push it by moving in the same direction. \n"
    "You cannot push a box through a wall, and you cannot pull a box. \n"
    "The answer should be a sequence of actions, like <answer>Right || Right || Up</answer>\n")
RAGEN_COORD_INSTRUCTION = (
    "You are solving the Sokoban puzzle. You are the player and you need to push all boxes to targets.\n"
    "You are provided with a symbol grid and the zero-indexed coordinates of the player, each box, and each target. \n"
    "Coordinates range from the top-left corner (0, 0) to the bottom-right corner (5, 5). \n"
    "When you are exactly next to a box, you can push it by moving in the same direction. \n"
    "You cannot push a box through a wall, and you cannot pull a box.\n"
    "The answer should be a sequence of actions, like <answer>Right || Right || Up</answer>.\n")


@pytest.mark.parametrize("name,text", [("SimpleSokoban", RAGEN_GRID_INSTRUCTION),
                                       ("LargerSokoban", RAGEN_GRID_INSTRUCTION),
                                       ("SokobanDifferentGridVocab", RAGEN_GRID_INSTRUCTION),
                                       ("CoordSokoban", RAGEN_COORD_INSTRUCTION)])
def test_ragen_named_configs_give_ragens_instruction(name, text):
    assert registry.make(name).instruction() == text


@pytest.mark.parametrize("variant", ["SimpleSokoban", "CoordSokoban"])
@pytest.mark.parametrize("fmt", ["grid", "coord", "grid_coord"])
@pytest.mark.parametrize("dim_room", [(6, 6), (7, 5)])
def test_instruction_names_only_what_the_observation_shows(variant, fmt, dim_room):
    # The coord format's instruction said "You are provided with a symbol grid" while its observation has no grid.
    rows, cols = dim_room
    env = registry.make(variant, observation_format=fmt, dim_room=dim_room)
    grid = "\n".join(["#" * cols, "#PXO" + "_" * (cols - 5) + "#"] + ["#" * cols] * (rows - 2))
    obs, text = env.render_text(env.state_from_grid(grid)), env.instruction().lower()
    shows_grid, shows_coords = grid in obs, "Board size" in obs
    assert shows_grid or "grid" not in text, (fmt, text)
    assert ("coordinates" in text) == shows_coords, (fmt, text)
    if shows_coords:
        assert f"bottom-right corner ({rows - 1}, {cols - 1})" in text
        assert all(label in obs for label in ("Player: ", "Boxes: ", "Targets: "))
        assert shows_grid or ("walls are not listed" in text and "Walls" not in obs)
