"""RAGEN's 2x2 Rubik's cube (`rubikscube`) as a gymnax environment: sticker permutations in JAX, RAGEN's text.

Rules (RAGEN's ragen/env/rubikscube): reset scrambles the solved cube with `scramble_depth` uniformly drawn moves
(any of the 12; a move may undo the one before); each step makes one move (always effective), rewards 1.0 when
every face shows one colour (the episode ends solved), else 0; the episode ends unsolved after `max_steps`
moves. Move ids are RAGEN's 1..12 minus one: U, U', D, D', L, L', R, R', F, F', B, B'.

`reset_from_seeds(seeds)` gives RAGEN's scramble of each integer seed (its numpy draws); `reset(key)` draws the
scramble in JAX.
"""

from __future__ import annotations

from typing import Any, Sequence

import chex
import jax
import jax.numpy as jnp
import numpy as np
from gymnax.environments import spaces

from envs.protocols import JaxEnv
from envs.ragen_keys import RagenKeys
from envs.rubikscube import cube, oracle
from envs.rubikscube.types import CubeParams, CubeState

# RAGEN's envs.yaml env_instruction of rubikscube (its text, one line per line).
INSTRUCTION = (
    "You are solving a 2x2 Rubik's Cube (Pocket Cube). The goal is to restore the cube so that each of the faces "
    "consists of a single, unique color.\n"
    "Available actions use standard Singmaster notation for face rotations: U, U', D, D', L, L', R, R', F, F', B, "
    "B'.\n"
    "- Faces: U (Up), D (Down), L (Left), R (Right), F (Front), B (Back).\n"
    "- Modifiers: A letter alone means 90° clockwise (e.g., 'R'). A letter with prime (') means 90° "
    "counter-clockwise (e.g., \"R'\").\n"
    "Respond with a sequence of actions separated by \"||\".\n"
    "Example: <answer>U</answer>\n"
)
MAX_ORACLE_DEPTH = 6  # the BFS table beyond this grows past a few million cubes: no oracle for deeper scrambles

_FIXED = "ragen-jax uses RAGEN's move names (ids 0..11 here: U, U', D, D', L, L', R, R', F, F', B, B')"
RAGEN_KEYS = RagenKeys(fixed={"action_lookup": ({i + 1: n for i, n in enumerate(cube.MOVE_NAMES)}, _FIXED),
                              "render_mode": ("text", "the cube renders text only")})


def faces_uniform(stickers: jax.Array) -> jax.Array:
    """RAGEN's solved check of stickers [24]: every face one colour."""
    faces = stickers.reshape(6, 4)
    return jnp.all(faces == faces[:, :1])


def ragen_scramble(seed: int, depth: int) -> np.ndarray:
    """RAGEN's scramble of integer `seed`: move ids [depth] (0-based), from numpy's generator seeded with it, one
    `integers(1, 13)` draw per move."""
    rng = np.random.default_rng(seed)
    return np.array([int(rng.integers(1, 13)) - 1 for _ in range(depth)], np.int32)


def render_cube(stickers: np.ndarray, time: int, max_steps: int) -> str:
    """RAGEN's text observation: step count, each face's 2x2 colours, then the moves (or how the game ended)."""
    stickers = np.asarray(stickers)
    solved, out_of_moves = cube.is_solved(stickers), time >= max_steps
    done = time > 0 and (solved or out_of_moves)  # RAGEN renders the reset state as not done, even if solved
    lines = ["=== Rubik's Cube 2x2 State ===", f"Step: {time}/{max_steps}", ""]
    for f, (letter, name) in enumerate(zip(cube.FACES, cube.FACE_NAMES)):
        c = [cube.COLOURS[int(v)] for v in stickers[4 * f:4 * f + 4]]
        label = f"{name} ({letter}):"
        lines.append(f"{label:<11}[{c[0]}, {c[1]}]\n [{c[2]}, {c[3]}]")
    if done:
        lines += ["", f"=== Game Over: {'Cube Solved!' if solved else 'Max steps reached.'} ==="]
    else:
        lines += ["", "Available Actions:", ", ".join(cube.MOVE_NAMES), "\nWhat is your next move?"]
    return "\n".join(lines)


class RubiksCube(JaxEnv[CubeState, CubeParams]):
    """RAGEN's 2x2 cube: a seeded scramble, 12 face turns, reward 1 when solved."""

    action_lookup = {name.lower(): i for i, name in enumerate(cube.MOVE_NAMES)}
    ragen_keys = RAGEN_KEYS

    def __init__(self, scramble_depth: int = 5, max_steps: int = 20, instruction: str | None = None):
        super().__init__()
        if scramble_depth < 0 or max_steps < 1:
            raise ValueError(f"RubiksCube: need scramble_depth >= 0 and max_steps >= 1, got scramble_depth="
                             f"{scramble_depth}, max_steps={max_steps}.")
        self.scramble_depth, self.max_steps = int(scramble_depth), int(max_steps)
        self._instruction = instruction
        self._moves = jnp.asarray(cube.MOVES)
        self._reset_states = jax.jit(jax.vmap(self._scrambled))

    def _scrambled(self, moves: jax.Array) -> CubeState:
        """The solved cube after move ids `moves` [depth] (no moves: solved)."""
        def body(stickers, a):
            return stickers[self._moves[a]], None

        stickers, _ = jax.lax.scan(body, jnp.asarray(cube.SOLVED), moves)
        return CubeState(stickers=stickers, time=jnp.zeros((), jnp.int32))

    # ---- gymnax API -------------------------------------------------------------------------
    @property
    def default_params(self) -> CubeParams:
        return CubeParams(scramble_depth=self.scramble_depth, max_steps_in_episode=self.max_steps)

    def reset_env(self, key: chex.PRNGKey, params: CubeParams) -> tuple[jax.Array, CubeState]:
        state = self._scrambled(jax.random.randint(key, (params.scramble_depth,), 0, len(cube.MOVE_NAMES)))
        return self.get_obs(state), state

    def step_env(self, key: chex.PRNGKey, state: CubeState, action: jax.Array,
                 params: CubeParams) -> tuple[jax.Array, CubeState, jax.Array, jax.Array, dict[str, Any]]:
        stickers = state.stickers[self._moves[jnp.asarray(action, jnp.int32)]]
        new_state = CubeState(stickers=stickers, time=state.time + 1)
        solved = faces_uniform(stickers)
        info = {"action_is_effective": jnp.bool_(True), "success": solved}
        return self.get_obs(new_state), new_state, solved.astype(jnp.float32), solved, info

    def get_obs(self, state: CubeState, params: CubeParams | None = None, key: Any = None) -> jax.Array:
        """The stickers [24] int8."""
        return state.stickers

    def is_terminated(self, state: CubeState, params: CubeParams) -> jax.Array:
        return faces_uniform(state.stickers)

    @property
    def num_actions(self) -> int:
        return len(cube.MOVE_NAMES)

    def action_space(self, params: CubeParams | None = None) -> spaces.Discrete:
        return spaces.Discrete(len(cube.MOVE_NAMES))

    def observation_space(self, params: CubeParams | None = None) -> spaces.Box:
        return spaces.Box(0, 5, (cube.NUM_STICKERS,), jnp.int8)

    # ---- text side --------------------------------------------------------------------------
    @property
    def action_names(self) -> list[str]:
        return list(cube.MOVE_NAMES)

    def instruction(self) -> str:
        return self._instruction if self._instruction is not None else INSTRUCTION

    def render_text(self, state: CubeState, params: CubeParams | None = None) -> str:
        return render_cube(np.asarray(state.stickers), int(state.time), self.max_steps)

    # ---- seeds, oracle ------------------------------------------------------------------------
    def reset_from_seeds(self, seeds: Sequence[int], params: CubeParams | None = None) -> CubeState:
        """Batched state [B] with RAGEN's scramble of each integer seed."""
        moves = np.stack([ragen_scramble(int(s), self.scramble_depth) for s in seeds])
        return self._reset_states(jnp.asarray(moves))

    def state_from_moves(self, moves: Sequence[str]) -> CubeState:
        """An unbatched state: the solved cube after the named moves (e.g. ["R", "U'"])."""
        try:
            ids = [cube.MOVE_NAMES.index(m) for m in moves]
        except ValueError:
            raise ValueError(f"RubiksCube moves are {', '.join(cube.MOVE_NAMES)}; got {list(moves)}.") from None
        return self._scrambled(jnp.asarray(ids, jnp.int32).reshape(-1))

    def oracle_actions(self, state: CubeState) -> list[int] | None:
        """Fewest moves to a solved cube (BFS table as deep as the scramble); None if deeper (no plan)."""
        depth = min(max(self.scramble_depth, 1), MAX_ORACLE_DEPTH)
        return oracle.solve(np.asarray(state.stickers), depth) or None
