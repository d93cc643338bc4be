"""FrozenLake maps: random frozen/hole board, random start and goal, guaranteed reachable.

Two generators of the same distribution: `generate_map_jax` (jittable rejection sampling with a
flood-fill reachability check, used by `reset(key)`) and `generate_map_numpy`, which draws like
RAGEN's `generate_random_map(size, p, seed)` (numpy Generator seeded from the integer seed) so
seed s gives RAGEN's map for seed s.
Tile codes: 0 frozen, 1 hole, 2 start, 3 goal.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

FROZEN, HOLE, START, GOAL = 0, 1, 2, 3
# Row/col deltas of Left, Down, Right, Up (action ids 0..3, as gymnasium).
DELTAS = ((0, -1), (1, 0), (0, 1), (-1, 0))


def reachable_jax(passable: jax.Array, start: jax.Array) -> jax.Array:
    """Cells [N, N] bool reachable from `start` (flat index) through `passable` cells (4-neighbour)."""
    n = passable.shape[0]
    seen = jnp.zeros_like(passable).reshape(-1).at[start].set(True).reshape(passable.shape)

    def grow(_, seen):
        shifted = jnp.zeros_like(seen)
        shifted = shifted.at[1:, :].set(shifted[1:, :] | seen[:-1, :]).at[:-1, :].set(shifted[:-1, :] | seen[1:, :])
        shifted = shifted.at[:, 1:].set(shifted[:, 1:] | seen[:, :-1]).at[:, :-1].set(shifted[:, :-1] | seen[:, 1:])
        return seen | (shifted & passable)

    return jax.lax.fori_loop(0, n * n, grow, seen)


def generate_map_jax(key: jax.Array, size: int, p: float) -> jax.Array:
    """A solvable map [size, size] int8: each cell frozen w.p. p, distinct random start and goal."""

    def draw(key):
        k_board, k_start, k_goal = jax.random.split(key, 3)
        holes = ~jax.random.bernoulli(k_board, p, (size, size))
        start = jax.random.randint(k_start, (), 0, size * size)
        goal = jax.random.randint(k_goal, (), 0, size * size)
        tiles = jnp.where(holes, HOLE, FROZEN).reshape(-1).at[start].set(START).at[goal].set(GOAL)
        tiles = tiles.reshape(size, size)
        ok = (start != goal) & reachable_jax(tiles != HOLE, start).reshape(-1)[goal]
        return tiles.astype(jnp.int8), ok

    def cond(carry):
        return ~carry[2]

    def body(carry):
        key, _, _ = carry
        key, sub = jax.random.split(key)
        tiles, ok = draw(sub)
        return key, tiles, ok

    init = (key, jnp.zeros((size, size), jnp.int8), jnp.array(False))
    return jax.lax.while_loop(cond, body, init)[1]


def _reachable_numpy(board: np.ndarray, start: tuple[int, int]) -> bool:
    """Depth-first search from start over non-hole cells; True once a neighbour is the goal."""
    size = board.shape[0]
    stack, seen = [start], set()
    while stack:
        r, c = stack.pop()
        if (r, c) in seen:
            continue
        seen.add((r, c))
        for dr, dc in ((1, 0), (0, 1), (-1, 0), (0, -1)):
            nr, nc = r + dr, c + dc
            if 0 <= nr < size and 0 <= nc < size:
                if board[nr, nc] == "G":
                    return True
                if board[nr, nc] != "H":
                    stack.append((nr, nc))
    return False


def generate_map_numpy(seed: int, size: int, p: float) -> np.ndarray:
    """RAGEN's map for integer `seed` as tile codes [size, size] int8 (same draws, same order)."""
    rng = np.random.default_rng(seed)
    while True:
        board = rng.choice(["F", "H"], (size, size), p=[p, 1 - p])
        start = tuple(int(v) for v in rng.integers(size, size=2))
        goal = tuple(int(v) for v in rng.integers(size, size=2))
        if start != goal:
            board[start], board[goal] = "S", "G"
            if _reachable_numpy(board, start):
                break
    codes = {"F": FROZEN, "H": HOLE, "S": START, "G": GOAL}
    return np.vectorize(codes.__getitem__)(board).astype(np.int8)
