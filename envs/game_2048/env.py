"""RAGEN's 2048 (`game_2048`) as a gymnax environment: slides and merges in JAX, RAGEN's rewards and text.

Rules (RAGEN's ragen/env/game_2048): a 4x4 board starts with two tiles; a move that changes the board slides
and merges it and then adds one tile (2 with probability two_prob, else 4) on a uniformly drawn empty cell. A
move that changes nothing is an invalid action (`action_is_valid` False, `action_is_effective` False): no tile
is added and the step costs RAGEN's invalid score -0.1, which its log reward (the default) turns into 0. The
reward of a move is its merged sum s: 0.1 * log2(s + 1) with use_log_reward (0 without a merge), else s. The
game ends when the board is full and no move is left (success if a 2048 tile stands then); `target_tile`
(ours, not RAGEN's) instead ends the episode solved as soon as a tile that high appears, for short CPU runs.
Action ids are RAGEN's: 0 Up, 1 Right, 2 Down, 3 Left.

`reset_from_seeds(seeds)` gives RAGEN's starting board of each integer seed (its numpy draws); the tiles added
after moves come from the episode's JAX keys, so a seed's later boards differ from RAGEN's (envs/game_2048/
README.md).
"""

from __future__ import annotations

from typing import Any, Sequence

import chex
import jax
import jax.numpy as jnp
import numpy as np
from gymnax.environments import spaces

from envs.game_2048 import oracle, rules
from envs.game_2048.types import Game2048Params, Game2048State
from envs.protocols import JaxEnv
from envs.ragen_keys import RagenKeys

# RAGEN's envs.yaml env_instruction of game_2048 (its text, one line per line).
INSTRUCTION = (
    "You are playing the 2048 game on a 4x4 grid. Merge equal tiles by sliding Up, Right, Down, or Left.\n"
    "If a move is invalid (no tiles move), a small penalty is applied. Respond with a single action.\n"
    "Example: <answer>Up</answer>\n"
)
INVALID_SCORE = -0.1  # RAGEN's invalid_act_score (set in its config's __post_init__, not a key)

_FIXED = "ragen-jax uses RAGEN's action names and ids (0 Up, 1 Right, 2 Down, 3 Left)"
RAGEN_KEYS = RagenKeys(
    fixed={"action_lookup": ({0: "Up", 1: "Right", 2: "Down", 3: "Left"}, _FIXED),
           "render_mode": ("text", "2048 renders text only")},
)


def move_reward(gained: jax.Array, moved: jax.Array, use_log_reward: bool) -> jax.Array:
    """RAGEN's reward of one move: merged sum `gained`, or its invalid score when nothing `moved`; with
    `use_log_reward`, 0.1 * log2(raw + 1) for a positive raw reward and 0 otherwise."""
    raw = jnp.where(moved, gained.astype(jnp.float32), jnp.float32(INVALID_SCORE))
    if not use_log_reward:
        return raw
    return jnp.where(raw > 0, 0.1 * jnp.log2(raw + 1.0), 0.0).astype(jnp.float32)


def initial_board_numpy(seed: int, size: int = 4, two_prob: float = 0.9) -> np.ndarray:
    """RAGEN's starting board [size, size] int32 for integer `seed`: numpy's generator seeded with it adds two
    tiles, each on an empty cell (row-major list, uniform index), 2 if a uniform draw < two_prob else 4."""
    rng = np.random.default_rng(seed)
    board = np.zeros((size, size), np.int32)
    for _ in range(2):
        empties = list(zip(*np.where(board == 0)))
        r, c = empties[rng.integers(0, len(empties))]
        board[r, c] = 2 if rng.random() < two_prob else 4
    return board


def render_board(board: np.ndarray, score: int) -> str:
    """RAGEN's text observation: the rows, the moves that change the board as "id(Name)", the goal and score."""
    board = np.asarray(board)
    lines = ["Current 2048 Grid:"]
    lines += [f"Row {i + 1}: [{', '.join(str(int(v)) for v in row)}]" for i, row in enumerate(board)]
    legal = [a for a in range(4) if oracle.move(board, a)[2]]
    actions = ", ".join(f"{a}({rules.ACTION_NAMES[a]})" for a in legal) if legal else "None"
    lines += ["", f"Valid Actions: {actions}.", "Goal: Merge same numbers to reach 2048.",
              f"Current Score: {int(score)}", "What is your next move?"]
    return "\n".join(lines)


class Game2048(JaxEnv[Game2048State, Game2048Params]):
    """RAGEN's 2048: slide and merge, a new tile after each move that changes the board, log-merge rewards."""

    action_lookup = {"up": 0, "right": 1, "down": 2, "left": 3}
    ragen_keys = RAGEN_KEYS

    def __init__(self, size: int = 4, two_prob: float = 0.9, use_log_reward: bool = True, target_tile: int = 0,
                 max_steps: int = 0, instruction: str | None = None):
        super().__init__()
        if size < 2:
            raise ValueError(f"2048: size must be >= 2, got {size}.")
        if not 0.0 <= two_prob <= 1.0:
            raise ValueError(f"2048: two_prob must be within [0, 1], got {two_prob}.")
        if target_tile and (target_tile < 4 or target_tile & (target_tile - 1)):
            raise ValueError(f"2048: target_tile must be 0 (RAGEN's rule: play until no move is left) or a power "
                             f"of two >= 4, got {target_tile}.")
        if max_steps < 0:
            raise ValueError(f"2048: max_steps must be >= 0 (0: no cap of its own), got {max_steps}.")
        self.size, self.two_prob, self.use_log_reward = int(size), float(two_prob), bool(use_log_reward)
        self.target_tile, self.max_steps = int(target_tile), int(max_steps)
        self._instruction = instruction
        self._reset_boards = jax.jit(jax.vmap(_state_of_board))

    # ---- gymnax API -------------------------------------------------------------------------
    @property
    def default_params(self) -> Game2048Params:
        return Game2048Params(two_prob=self.two_prob, target_tile=self.target_tile, size=self.size,
                              max_steps_in_episode=self.max_steps)

    def reset_env(self, key: chex.PRNGKey, params: Game2048Params) -> tuple[jax.Array, Game2048State]:
        first, second = jax.random.split(key)
        board = jnp.zeros((params.size, params.size), jnp.int32)
        board = rules.spawn_tile(second, rules.spawn_tile(first, board, params.two_prob), params.two_prob)
        state = _state_of_board(board)
        return self.get_obs(state), state

    def step_env(self, key: chex.PRNGKey, state: Game2048State, action: jax.Array,
                 params: Game2048Params) -> tuple[jax.Array, Game2048State, jax.Array, jax.Array, dict[str, Any]]:
        boards, gains, moved_all = rules.all_moves(state.board)
        action = jnp.asarray(action, jnp.int32)
        moved, gained = moved_all[action], gains[action]
        board = jnp.where(moved, rules.spawn_tile(key, boards[action], params.two_prob), state.board)
        stuck = moved & rules.no_move_left(board)
        top = board.max()
        reached = (top >= params.target_tile) if params.target_tile else jnp.bool_(False)
        terminated = stuck | (moved & reached)
        new_state = Game2048State(board=board, score=state.score + jnp.where(moved, gained, 0),
                                  time=state.time + 1)
        success = (stuck & (top >= rules.WIN_TILE)) | (moved & reached)
        info = {"action_is_effective": moved, "action_is_valid": moved, "success": success}
        reward = move_reward(gained, moved, self.use_log_reward)
        return self.get_obs(new_state), new_state, reward, terminated, info

    def get_obs(self, state: Game2048State, params: Game2048Params | None = None, key: Any = None) -> jax.Array:
        """The board [N, N] int32 (tile values)."""
        return state.board

    def is_terminated(self, state: Game2048State, params: Game2048Params) -> jax.Array:
        reached = (state.board.max() >= params.target_tile) if params.target_tile else jnp.bool_(False)
        return reached | rules.no_move_left(state.board)

    def is_truncated(self, state: Game2048State, params: Game2048Params) -> jax.Array:
        """The env's own step cap (none by default, as in RAGEN)."""
        if not params.max_steps_in_episode:
            return jnp.bool_(False)
        return state.time >= params.max_steps_in_episode

    @property
    def num_actions(self) -> int:
        return 4

    def action_space(self, params: Game2048Params | None = None) -> spaces.Discrete:
        return spaces.Discrete(4)

    def observation_space(self, params: Game2048Params | None = None) -> spaces.Box:
        return spaces.Box(0, 2 ** 17, (self.size, self.size), jnp.int32)

    # ---- text side --------------------------------------------------------------------------
    @property
    def action_names(self) -> list[str]:
        return list(rules.ACTION_NAMES)

    def instruction(self) -> str:
        return self._instruction if self._instruction is not None else INSTRUCTION

    def render_text(self, state: Game2048State, params: Game2048Params | None = None) -> str:
        return render_board(np.asarray(state.board), int(state.score))

    # ---- seeds, hand-built boards, oracle -----------------------------------------------------
    def reset_from_seeds(self, seeds: Sequence[int], params: Game2048Params | None = None) -> Game2048State:
        """Batched state [B] with RAGEN's starting board of each integer seed."""
        boards = np.stack([initial_board_numpy(int(s), self.size, self.two_prob) for s in seeds])
        return self._reset_boards(jnp.asarray(boards))

    def state_from_board(self, board, score: int = 0) -> Game2048State:
        """An unbatched state from a board given as rows of tile values (0 empty)."""
        board = np.asarray(board, np.int32)
        if board.shape != (self.size, self.size):
            raise ValueError(f"2048: board must be {self.size}x{self.size}, got shape {board.shape}.")
        if np.any((board < 0) | ((board != 0) & (board & (board - 1) != 0)) | (board == 1)):
            raise ValueError(f"2048: tiles are 0 (empty) or powers of two >= 2, got {board.tolist()}.")
        return Game2048State(board=jnp.asarray(board), score=jnp.int32(score), time=jnp.int32(0))

    def oracle_actions(self, state: Game2048State) -> list[int] | None:
        """The corner heuristic's next move (one: the next tile is random); None when no move is left."""
        action = oracle.corner_move(np.asarray(state.board))
        return None if action is None else [action]


def _state_of_board(board: jax.Array) -> Game2048State:
    return Game2048State(board=board.astype(jnp.int32), score=jnp.zeros((), jnp.int32), time=jnp.zeros((), jnp.int32))
