"""2x2 cube: moves are permutations with their inverses and order 4, RAGEN's solved check, seeded scrambles and
text, the BFS solver on short scrambles, jit + vmap in a batch."""

import jax
import numpy as np
import pytest

from envs import registry
from envs.batch import JaxEnvBatch
from envs.rubikscube import RubiksCube, cube, solve
from envs.rubikscube.env import ragen_scramble, render_cube

IDENTITY = np.arange(24)


def test_each_move_is_a_permutation_undone_by_its_inverse_and_of_order_four():
    assert cube.MOVES.shape == (12, 24)
    for a, name in enumerate(cube.MOVE_NAMES):
        perm = cube.MOVES[a]
        assert sorted(perm.tolist()) == IDENTITY.tolist(), name
        assert not np.array_equal(perm, IDENTITY), name
        assert np.array_equal(cube.compose(perm, cube.MOVES[cube.INVERSE[a]]), IDENTITY), name
        assert np.array_equal(cube.compose(perm, perm, perm, perm), IDENTITY), name
        assert cube.MOVE_NAMES[cube.INVERSE[a]] in (name + "'", name.rstrip("'"))
        moved = np.flatnonzero(perm != IDENTITY)
        assert len(moved) == 12  # a quarter-turn moves its face's 4 stickers and the 8 of its ring
        face = "ULFRBD".index(name[0])
        assert set(range(4 * face, 4 * face + 4)) <= set(moved.tolist())


def test_opposite_turns_commute_and_a_turn_keeps_its_opposite_face():
    for a, b in (("U", "D"), ("L", "R"), ("F", "B")):
        pa, pb = cube.MOVES[cube.MOVE_NAMES.index(a)], cube.MOVES[cube.MOVE_NAMES.index(b)]
        assert np.array_equal(cube.compose(pa, pb), cube.compose(pb, pa))
        opposite = "ULFRBD".index(b)
        assert np.array_equal(pa[4 * opposite:4 * opposite + 4], np.arange(4 * opposite, 4 * opposite + 4))


def test_solved_check_is_ragens_faces_one_colour():
    assert cube.is_solved(cube.SOLVED)
    assert not cube.is_solved(cube.apply_moves(cube.SOLVED, [0]))
    assert cube.is_solved(cube.apply_moves(cube.SOLVED, [0, 3]))  # U D' turns the whole cube: RAGEN calls it solved
    assert len(solve.__globals__["solved_cubes"]()) == 24  # the 24 whole-cube turns of the solved cube


def test_step_rewards_one_on_solving_and_counts_moves():
    env = RubiksCube(scramble_depth=1, max_steps=3)
    step = jax.jit(env.step_env, static_argnums=3)
    state = env.state_from_moves(["R"])
    _, after, reward, terminated, info = step(None, state, cube.MOVE_NAMES.index("R"), env.default_params)
    assert float(reward) == 0.0 and not bool(terminated) and bool(info["action_is_effective"])
    assert int(after.time) == 1
    _, after, reward, terminated, info = step(None, state, cube.MOVE_NAMES.index("R'"), env.default_params)
    assert float(reward) == 1.0 and bool(terminated) and bool(info["success"])
    assert bool(env.is_truncated(after.replace(time=np.int32(3)), env.default_params))


@pytest.mark.parametrize("depth", [1, 2, 3, 4])
def test_bfs_solves_a_depth_k_scramble_in_at_most_k_moves(depth):
    rng = np.random.default_rng(depth)
    for _ in range(20):
        scramble = rng.integers(0, 12, depth)
        stickers = cube.apply_moves(cube.SOLVED, scramble)
        plan = solve(stickers, depth)
        assert plan is not None and len(plan) <= depth
        assert cube.is_solved(cube.apply_moves(stickers, plan))
        if plan:  # shortest: no shorter table has it
            assert solve(stickers, len(plan) - 1) is None


def test_ragen_seeded_scramble_and_text():
    env = RubiksCube(scramble_depth=3, max_steps=20)
    moves = ragen_scramble(7, 3)
    want = np.random.default_rng(7)
    assert moves.tolist() == [int(want.integers(1, 13)) - 1 for _ in range(3)]
    state = jax.tree.map(lambda x: np.asarray(x[0]), env.reset_from_seeds([7]))
    assert np.array_equal(state.stickers, cube.apply_moves(cube.SOLVED, moves))
    assert render_cube(cube.SOLVED, 0, 20) == (
        "=== Rubik's Cube 2x2 State ===\nStep: 0/20\n\n"
        "Up (U):    [W, W]\n [W, W]\nLeft (L):  [O, O]\n [O, O]\nFront (F): [G, G]\n [G, G]\n"
        "Right (R): [R, R]\n [R, R]\nBack (B):  [B, B]\n [B, B]\nDown (D):  [Y, Y]\n [Y, Y]\n\n"
        "Available Actions:\nU, U', D, D', L, L', R, R', F, F', B, B'\n\nWhat is your next move?")
    assert render_cube(cube.SOLVED, 2, 20).endswith("\n\n=== Game Over: Cube Solved! ===")
    assert render_cube(cube.apply_moves(cube.SOLVED, [0]), 20, 20).endswith("=== Game Over: Max steps reached. ===")
    up_turned = render_cube(cube.apply_moves(cube.SOLVED, [0]), 1, 20)
    assert "Left (L):  [G, G]\n [O, O]" in up_turned  # U brings the front's top row to the left


def test_batch_jit_vmap_registry_and_oracle():
    spec = registry.get_spec("rubikscube")
    assert spec.kind == "jax" and spec.prompt_max_tokens == 96 and spec.kwargs["scramble_depth"] == 1
    batch = JaxEnvBatch(registry.make("rubikscube", scramble_depth=2), 6)
    batch.reset(list(range(6)))
    host = jax.device_get(batch.state)
    plans = [batch.env.oracle_actions(jax.tree.map(lambda x: x[i], host)) or [] for i in range(6)]
    result = batch.step(plans, np.ones(6, bool))
    solvable = np.array([bool(p) for p in plans])
    assert solvable.any() and np.array_equal(result.success, solvable)
    assert np.array_equal(result.rewards, solvable.astype(np.float32))
    assert all(o.startswith("=== Rubik's Cube 2x2 State ===") for o in result.observations)
    assert batch.action_lookup["u'"] == 1 and batch.action_lookup["b'"] == 11
