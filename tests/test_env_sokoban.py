"""Sokoban: transitions and rewards on hand-built levels, generation, oracle, renders, gymnax API."""

import importlib.util
import os
import random
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
        pytest.skip("gym-sokoban not installed")
    if "pkg_resources" not in sys.modules:  # gym-sokoban imports pkg_resources, gone from new setuptools
        stub = types.ModuleType("pkg_resources")
        stub.resource_filename = lambda pkg, path: os.path.join(
            os.path.dirname(importlib.util.find_spec(pkg).origin), path)
        sys.modules["pkg_resources"] = stub
    try:
        from gym_sokoban.envs import room_utils, sokoban_env
    except Exception as e:  # noqa: BLE001
        pytest.skip(f"gym-sokoban does not import: {e}")
    return room_utils, sokoban_env


def test_topology_and_placement_match_gym_sokoban_draw_for_draw():
    room_utils, _ = _import_gym_sokoban()
    for seed in range(150):
        random.seed(seed)
        np.random.seed(seed)
        theirs = room_utils.room_topology_generation((6, 6), 0.35, 20)
        try:
            theirs = room_utils.place_boxes_and_player(theirs, 1, False)
        except RuntimeError:
            theirs = None
        ours = generator.room_topology(random.Random(seed), (6, 6), 0.35, 20)
        try:
            ours = np.array(generator.place_player_and_targets(np.random.RandomState(seed), ours, 1)).reshape(6, 6)
        except generator.GenerationFailed:
            ours = None
        assert (theirs is None) == (ours is None)
        if ours is not None:
            np.testing.assert_array_equal(theirs, ours)


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
