"""2048: slides and merges from hand-worked boards, RAGEN's rewards and text, no-op moves, spawns, jit + vmap."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from envs import registry
from envs.batch import JaxEnvBatch
from envs.game_2048 import Game2048, corner_move
from envs.game_2048 import oracle
from envs.game_2048.env import initial_board_numpy, move_reward
from envs.game_2048.rules import all_moves, spawn_tile

UP, RIGHT, DOWN, LEFT = 0, 1, 2, 3
KEY = jax.random.PRNGKey(0)


@pytest.fixture(scope="module")
def env():
    return Game2048()


@pytest.fixture(scope="module")
def step(env):
    return jax.jit(env.step_env, static_argnums=3)


@pytest.fixture(scope="module")
def moves():
    """all_moves of a batch of boards [B, 4, 4], compiled once."""
    return jax.jit(jax.vmap(all_moves))


@pytest.mark.parametrize("row,want,gained", [
    ([2, 2, 2, 2], [4, 4, 0, 0], 8),
    ([2, 2, 4, 0], [4, 4, 0, 0], 4),  # the merged 4 does not merge again with the 4 beside it
    ([4, 4, 8, 8], [8, 16, 0, 0], 24),
    ([2, 0, 0, 2], [4, 0, 0, 0], 4),
    ([2, 4, 2, 4], [2, 4, 2, 4], 0),
    ([0, 0, 0, 2], [2, 0, 0, 0], 0),
    ([8, 8, 8, 0], [16, 8, 0, 0], 16),  # the pair nearest the side merges first
    ([0, 0, 0, 0], [0, 0, 0, 0], 0),
])
def test_slide_left_by_hand(row, want, gained, moves):
    boards, gains, _ = moves(jnp.asarray([row + [0] * 4 * 3], jnp.int32).reshape(1, 4, 4))
    assert boards[0, LEFT, 0].tolist() == want and int(gains[0, LEFT]) == gained
    assert oracle.slide_line(row) == (want, gained)  # the host heuristic's slide agrees


BOARD = np.array([[2, 2, 0, 0],
                  [0, 4, 0, 4],
                  [2, 0, 2, 8],
                  [0, 0, 0, 8]], np.int32)


def test_four_directions_by_hand(moves):
    boards, gains, moved = jax.tree.map(lambda x: x[0], moves(jnp.asarray(BOARD[None])))
    want = {
        UP: ([[4, 2, 2, 4], [0, 4, 0, 16], [0, 0, 0, 0], [0, 0, 0, 0]], 4 + 16),
        RIGHT: ([[0, 0, 0, 4], [0, 0, 0, 8], [0, 0, 4, 8], [0, 0, 0, 8]], 4 + 8 + 4),
        DOWN: ([[0, 0, 0, 0], [0, 0, 0, 0], [0, 2, 0, 4], [4, 4, 2, 16]], 4 + 16),
        LEFT: ([[4, 0, 0, 0], [8, 0, 0, 0], [4, 8, 0, 0], [8, 0, 0, 0]], 4 + 8 + 4),
    }
    for action, (board, gained) in want.items():
        assert boards[action].tolist() == board, action
        assert int(gains[action]) == gained and bool(moved[action])
        host, host_gained, host_moved = oracle.move(BOARD, action)
        assert host.tolist() == board and host_gained == gained and host_moved


def test_random_boards_agree_with_the_host_slide(moves):
    rng = np.random.default_rng(0)
    boards = np.where(rng.random((64, 4, 4)) < 0.6, 2 ** rng.integers(1, 5, (64, 4, 4)), 0).astype(np.int32)
    got, gains, moved = moves(jnp.asarray(boards))
    for b in range(64):
        for a in range(4):
            host, g, m = oracle.move(boards[b], a)
            assert got[b, a].tolist() == host.tolist() and int(gains[b, a]) == g and bool(moved[b, a]) == m


def test_merge_reward_is_ragens_log_and_score_is_raw(env, step):
    state = env.state_from_board([[2, 2, 4, 4], [0] * 4, [0] * 4, [0] * 4], score=10)
    _, state, reward, terminated, info = step(KEY, state, LEFT, env.default_params)
    assert float(reward) == pytest.approx(0.1 * math.log2(12 + 1)) and int(state.score) == 22
    assert state.board[0, :2].tolist() == [4, 8] and int((state.board != 0).sum()) == 3  # one new tile
    assert bool(info["action_is_effective"]) and bool(info["action_is_valid"]) and not bool(terminated)
    assert float(move_reward(jnp.int32(12), jnp.bool_(True), use_log_reward=False)) == 12.0


def test_move_without_merge_rewards_zero(env, step):
    state = env.state_from_board([[0, 2, 0, 4], [0] * 4, [0] * 4, [0] * 4])
    _, state, reward, _, info = step(KEY, state, LEFT, env.default_params)
    assert float(reward) == 0.0 and bool(info["action_is_effective"]) and int(state.score) == 0


def test_noop_move_is_invalid_adds_no_tile_and_costs_what_ragen_charges(env, step):
    board = [[2, 4, 0, 0], [0] * 4, [0] * 4, [0] * 4]
    _, state, reward, terminated, info = step(KEY, env.state_from_board(board), LEFT, env.default_params)
    assert state.board.tolist() == board and int(state.time) == 1
    assert not bool(info["action_is_valid"]) and not bool(info["action_is_effective"]) and not bool(terminated)
    assert float(reward) == 0.0  # RAGEN's -0.1 goes through its log reward, which keeps only positive rewards
    assert float(move_reward(jnp.int32(0), jnp.bool_(False), use_log_reward=False)) == pytest.approx(-0.1)


def test_game_ends_when_no_move_is_left_success_only_with_2048(env, step):
    # one move (Left merges the 2s) that leaves a full board with no move: the game ends, not solved
    board = [[2, 2, 4, 8], [4, 8, 16, 32], [8, 16, 32, 64], [16, 32, 64, 128]]
    _, state, _, terminated, info = step(KEY, env.state_from_board(board), LEFT, env.default_params)
    after = np.asarray(state.board)
    assert after[0, :3].tolist() == [4, 4, 8] and after[0, 3] in (2, 4)
    assert bool(terminated) == (not any(oracle.move(after, a)[2] for a in range(4)))
    assert not bool(info["success"])
    win = [[2, 2, 4, 8], [4, 8, 16, 32], [8, 16, 32, 64], [16, 32, 64, 2048]]
    _, state, _, terminated, info = step(KEY, env.state_from_board(win), LEFT, env.default_params)
    stuck = not any(oracle.move(np.asarray(state.board), a)[2] for a in range(4))
    assert bool(terminated) == stuck and bool(info["success"]) == stuck


def test_reaching_2048_alone_does_not_end_ragens_game(env, step):
    board = [[1024, 1024, 0, 0], [0] * 4, [0] * 4, [0] * 4]
    _, state, _, terminated, info = step(KEY, env.state_from_board(board), LEFT, env.default_params)
    assert int(state.board.max()) == 2048 and not bool(terminated) and not bool(info["success"])


def test_spawn_fills_an_empty_cell_with_two_or_four():
    boards = jnp.asarray(np.tile(BOARD, (512, 1, 1)))
    keys = jax.random.split(KEY, 512)
    spawned = jax.jit(jax.vmap(spawn_tile, in_axes=(0, 0, None)))(keys, boards, 0.9)
    added = np.asarray(spawned) - BOARD
    assert np.all((added != 0).sum(axis=(1, 2)) == 1) and np.all(added[:, BOARD != 0] == 0)
    values = added[added != 0]
    assert set(values.tolist()) == {2, 4} and 0.85 < (values == 2).mean() < 0.95
    cells = {tuple(c) for c in np.argwhere(added != 0)[:, 1:]}
    assert cells == {tuple(c) for c in np.argwhere(BOARD == 0)}  # every empty cell gets drawn


def test_ragen_start_boards_and_text(env):
    board = initial_board_numpy(0)
    assert (board != 0).sum() == 2 and set(board[board != 0].tolist()) <= {2, 4}
    state = jax.tree.map(lambda x: np.asarray(x[0]), env.reset_from_seeds([0]))
    assert np.array_equal(state.board, board)
    text = env.render_text(env.state_from_board([[2, 4, 0, 0], [0] * 4, [0] * 4, [0] * 4], score=8))
    assert text == ("Current 2048 Grid:\nRow 1: [2, 4, 0, 0]\nRow 2: [0, 0, 0, 0]\nRow 3: [0, 0, 0, 0]\n"
                    "Row 4: [0, 0, 0, 0]\n\nValid Actions: 1(Right), 2(Down).\nGoal: Merge same numbers to reach "
                    "2048.\nCurrent Score: 8\nWhat is your next move?")
    assert env.action_names == ["Up", "Right", "Down", "Left"]


def test_corner_heuristic_moves_legally_and_keeps_the_corner():
    assert corner_move(np.array([[2, 4, 2, 4], [4, 2, 4, 2], [2, 4, 2, 4], [4, 2, 4, 2]])) is None
    assert corner_move(np.array([[0, 8, 0, 0], [0] * 4, [0] * 4, [0] * 4])) == LEFT
    assert corner_move(np.array([[0, 0, 0, 0], [8, 0, 0, 0], [0] * 4, [0] * 4])) == UP


def test_batch_jit_vmap_registry_and_target_tile():
    """The registered env in a JaxEnvBatch (one jitted, vmapped turn): each row steps; `target_tile` ends a row
    solved once a tile that high appears."""
    spec = registry.get_spec("game_2048")
    assert spec.kind == "jax" and spec.prompt_max_tokens == 8192
    batch = JaxEnvBatch(registry.make("game_2048", target_tile=16), 8)
    batch.reset(list(range(8)))
    near = batch.env.state_from_board([[8, 8, 0, 0], [0] * 4, [0] * 4, [0] * 4])
    batch.state = jax.tree.map(lambda b, one: b.at[0].set(one), batch.state, near)
    result = batch.step([[LEFT]] + [[a % 4] for a in range(1, 8)], np.ones(8, bool))
    assert result.actions_executed.tolist() == [1] * 8
    assert all(r.startswith("Current 2048 Grid:") for r in result.observations)
    assert bool(result.terminated[0]) and bool(result.success[0]) and not result.success[1:].any()
    assert result.observations[0].startswith("Current 2048 Grid:\nRow 1: [16, ")
    with pytest.raises(ValueError, match="power of two"):
        Game2048(target_tile=12)
