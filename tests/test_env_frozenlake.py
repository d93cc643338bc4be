"""FrozenLake: holes, goal, slip statistics, solvable maps, seeds, renders, gymnax API."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from envs import registry
from envs.batch import JaxEnvBatch
from envs.frozenlake import FrozenLake, solve
from envs.frozenlake.env import seeded_slips
from envs.frozenlake.generator import GOAL, HOLE, generate_map_jax, generate_map_numpy

LEFT, DOWN, RIGHT, UP = 0, 1, 2, 3
KEY = jax.random.PRNGKey(0)
ROWS = ["FFGF", "HFFH", "FFHS", "FFFF"]  # the reference example board


@pytest.fixture(scope="module")
def env():
    return FrozenLake(success_rate=1.0)  # deterministic moves: the rules below are checked step by step


def test_default_slips_as_ragens_config():
    # RAGEN's FrozenLakeEnvConfig: success_rate 0.8 (a move goes where asked 80% of the time)
    assert FrozenLake().success_rate == 0.8 and FrozenLake().default_params.success_rate == 0.8


def test_hole_ends_episode_without_reward(env):
    state = env.state_from_rows(ROWS)
    _, state, reward, terminated, info = env.step_env(KEY, state, LEFT, env.default_params)
    assert bool(terminated) and float(reward) == 0.0 and not bool(info["success"])
    assert env.render_text(state) == "__G_\nO__O\n__X_\n____"


def test_goal_gives_one_and_success(env):
    state = env.state_from_rows(["FFFF", "FSGF", "FFFF", "FFFF"])
    _, state, reward, terminated, info = env.step_env(KEY, state, RIGHT, env.default_params)
    assert float(reward) == 1.0 and bool(terminated) and bool(info["success"])
    assert env.render_text(state) == "____\n__√_\n____\n____"
    # after the goal the episode is over: further steps give nothing
    _, again, reward, terminated, _ = env.step_env(KEY, state, LEFT, env.default_params)
    assert float(reward) == 0.0 and bool(terminated) and int(again.pos) == int(state.pos)


def test_oracle_plan_reaches_goal_around_holes(env):
    state = env.state_from_rows(ROWS)
    plan = env.oracle_actions(state)
    assert len(plan) == 7  # the two short routes are cut by holes at (1, 3) and (2, 2)
    rewards = []
    for a in plan:
        _, state, r, _, _ = env.step_env(KEY, state, a, env.default_params)
        rewards.append(float(r))
    assert rewards == [0.0] * 6 + [1.0]


def test_wall_bump_is_ineffective(env):
    state = env.state_from_rows(ROWS)
    _, new, _, _, info = env.step_env(KEY, state, RIGHT, env.default_params)
    assert int(new.pos) == int(state.pos) and not bool(info["action_is_effective"])


def test_reference_renders():
    env = registry.make("CoordFrozenLake")
    expected = ("Coordinates: \nBoard size: 4 rows x 4 cols (zero-indexed).\nStart: (2, 3)\nGoal: (0, 2)\n"
                "Player: (2, 3)\nHoles: (1, 0), (1, 3), (2, 2)\nGrid Map: \n__G_\nO__O\n__OP\n____")
    assert env.render_text(env.state_from_rows(ROWS)) == expected
    assert FrozenLake().legend() == ("\nThe meaning of each symbol in the state is:\nP: player, _: empty, O: hole, "
                                     "G: goal, X: player in hole, √: player on goal")


def _on_seeds(env, state, seeds):
    """One map played under many seeds: the state batched with each seed's slips."""
    slips = np.stack([seeded_slips(s, env.max_steps, env.success_rate) for s in seeds])
    batched = jax.tree.map(lambda x: jnp.broadcast_to(x, (len(slips),) + x.shape), state)
    return batched.replace(slips=jnp.asarray(slips))


def test_slip_statistics_over_seeds():
    env = FrozenLake(success_rate=0.8)
    rows = ["FFFF", "FSFF", "FFFF", "FFFG"]  # player at (1, 1): all moves possible
    states = _on_seeds(env, env.state_from_rows(rows), range(4000))
    step = jax.jit(jax.vmap(env.step_env, in_axes=(None, 0, None, None)))
    _, new, _, _, _ = step(KEY, states, DOWN, env.default_params)
    pos = np.asarray(new.pos)
    down, left, right = (pos == 9).mean(), (pos == 4).mean(), (pos == 6).mean()
    assert down == pytest.approx(0.8, abs=0.03)
    assert left == pytest.approx(0.1, abs=0.02) and right == pytest.approx(0.1, abs=0.02)
    assert (pos == 1).sum() == 0  # never the opposite direction
    deterministic = FrozenLake(success_rate=1.0)
    sure = _on_seeds(deterministic, deterministic.state_from_rows(rows), range(200))
    _, new, _, _, _ = step(KEY, sure, DOWN, deterministic.default_params)
    assert (np.asarray(new.pos) == 9).all()


def _gymnasium_desc(tiles: np.ndarray) -> list[str]:
    letters = {0: "F", HOLE: "H", 2: "S", GOAL: "G"}
    return ["".join(letters[int(t)] for t in row) for row in tiles]


@pytest.mark.parametrize("success_rate", [0.8, 1 / 3, 1.0])
def test_seeded_episodes_are_gymnasiums_frozenlake(success_rate):
    """RAGEN resets gymnasium's FrozenLake with the episode's seed: the same map, start and slips, step by step
    over several multi-action turns of a batch."""
    from gymnasium.envs.toy_text.frozen_lake import FrozenLakeEnv

    env = FrozenLake(success_rate=success_rate)
    seeds = list(range(300, 340))
    batch = JaxEnvBatch(env, len(seeds))
    batch.reset(seeds)
    references = []
    for s in seeds:
        ref = FrozenLakeEnv(desc=_gymnasium_desc(generate_map_numpy(s, 4, 0.9)), is_slippery=True,
                            success_rate=success_rate)
        ref.reset(seed=s)
        references.append(ref)
    rng = np.random.default_rng(0)
    done = np.zeros(len(seeds), bool)
    for _ in range(5):
        actions = [list(map(int, rng.integers(0, 4, 2))) for _ in seeds]
        result = batch.step(actions, np.ones(len(seeds), bool))
        for i, ref in enumerate(references):
            executed, reward = 0, 0.0
            for a in actions[i] if not done[i] else []:
                _, r, terminated, _, _ = ref.step(a)
                executed, reward = executed + 1, reward + r
                if terminated:
                    done[i] = True
                    break
            assert int(batch.state.pos[i]) == ref.s
            assert result.actions_executed[i] == executed and result.rewards[i] == reward


def test_slips_come_from_the_seed_not_the_batch_row():
    env = FrozenLake(success_rate=0.5)
    seeds = list(range(50))
    slips = np.asarray(env.reset_from_seeds(seeds).slips)
    assert len({row.tobytes() for row in slips}) == 50  # 50 seeds, 50 slip sequences
    np.testing.assert_array_equal(np.asarray(env.reset_from_seeds(seeds[::-1]).slips), slips[::-1])
    frequencies = [np.mean(slips == k) for k in (-1, 0, 1)]
    np.testing.assert_allclose(frequencies, [0.25, 0.5, 0.25], atol=0.02)


def test_generated_maps_solvable_and_seeded():
    maps = jax.jit(jax.vmap(lambda k: generate_map_jax(k, 4, 0.7)))(jax.random.split(KEY, 200))
    for tiles in np.asarray(maps):
        start = int(np.flatnonzero(tiles == 2)[0])
        assert (tiles == GOAL).sum() == 1 and solve(tiles, start)
    assert (np.asarray(maps) == HOLE).mean() == pytest.approx(0.3, abs=0.05)
    for seed in range(100):
        tiles = generate_map_numpy(seed, 4, 0.8)
        assert solve(tiles, int(np.flatnonzero(tiles == 2)[0]))
        np.testing.assert_array_equal(tiles, generate_map_numpy(seed, 4, 0.8))


def test_reset_from_seeds_and_seed_keys_are_deterministic(env):
    a, b = env.reset_from_seeds([3, 3, 4]), env.reset_from_seeds([3, 3, 4])
    np.testing.assert_array_equal(a.tiles, b.tiles)
    np.testing.assert_array_equal(a.tiles[0], a.tiles[1])
    o1, _ = env.reset(env.seed_to_key(11))
    o2, _ = env.reset(env.seed_to_key(11))
    np.testing.assert_array_equal(o1, o2)


def test_gymnax_api_six_tuple(env):
    obs, state = env.reset(KEY)
    plan = env.oracle_actions(state)
    for i, a in enumerate(plan):
        obs, state, reward, terminated, truncated, info = env.step(jax.random.PRNGKey(i), state, a)
    assert bool(terminated) and float(reward) == 1.0 and not bool(truncated)
    assert bool(info["success"]) and "final_observation" in info
    assert obs.shape == (4, 4) and int(state.time) == 0  # auto-reset


# RAGEN's env_instruction of its named FrozenLake configs (config/envs.yaml), CoordFrozenLake's "(5, 5)" included.
RAGEN_GRID_INSTRUCTION = (
    "You are solving the FrozenLake puzzle. Forbid the whole and go to the target. You may move to the unintended "
    "direction due to the slippery ice. Example answer format: <think>To forbid the hole and go to the target, I "
    "should go left then go up.</think><answer>Left || Up</answer>")
RAGEN_COORD_INSTRUCTION = (
    "You are solving the FrozenLake puzzle. The observation includes both a symbol grid and zero-indexed "
    "coordinates for the start, goal, player, and any holes.\n"
    "Coordinates range from the top-left corner (0, 0) to the bottom-right corner (5, 5).\n"
    "Beware that the ice is slippery, so the agent might slide and end up in an unintended tile.\n"
    "Respond with a sequence of actions such as <answer>Left || Up || Up</answer>.\n")


@pytest.mark.parametrize("name,text", [("FrozenLake", RAGEN_GRID_INSTRUCTION),
                                       ("CoordFrozenLake", RAGEN_COORD_INSTRUCTION)])
def test_ragen_named_configs_give_ragens_instruction(name, text):
    assert registry.make(name).instruction() == text


@pytest.mark.parametrize("variant", ["FrozenLake", "CoordFrozenLake"])
@pytest.mark.parametrize("fmt", ["grid", "coord", "grid_coord"])
@pytest.mark.parametrize("size", [4, 6])
def test_instruction_names_only_what_the_observation_shows(variant, fmt, size):
    # The coord format's instruction said "The observation includes both a symbol grid" while it shows no grid.
    env = registry.make(variant, observation_format=fmt, size=size)
    state = jax.tree.map(lambda x: x[0], env.reset_from_seeds([3]))
    obs, text = env.render_text(state), env.instruction().lower()
    shows_grid, shows_coords = "Grid Map" in obs or "Board size" not in obs, "Board size" in obs
    assert shows_grid or "grid" not in text, (fmt, text)
    assert ("coordinates" in text) == shows_coords, (fmt, text)
    if shows_coords:
        corner = 5 if (fmt, size) == ("grid_coord", 4) else size - 1  # CoordFrozenLake's board keeps RAGEN's text
        assert f"bottom-right corner ({corner}, {corner})" in text
        assert all(label in obs for label in ("Start: ", "Goal: ", "Player: "))
