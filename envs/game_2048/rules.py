"""2048's rules as pure array functions: slide and merge, tile spawns, legal moves (jittable, vmappable).

Action ids are RAGEN's: 0 Up, 1 Right, 2 Down, 3 Left. A move slides every line toward that side; two equal
tiles that meet merge once per move (the pair nearest the side first), and the move scores the sum of the
merged tiles.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

ACTION_NAMES = ("Up", "Right", "Down", "Left")
WIN_TILE = 2048  # RAGEN's success: the game ended with a tile this high


def slide_row_left(row: jax.Array) -> tuple[jax.Array, jax.Array]:
    """One line [N] slid toward index 0 with merges -> (line [N], merged tile sum []).

    Tiles keep their order; scanning from index 0, a tile equal to the next one merges with it into their
    double, and the merged tile takes no further part this move ([2, 2, 2, 2] -> [4, 4, 0, 0]). Written with
    one-hot sums instead of scatters (several times faster when vmapped on a CPU)."""
    n = row.shape[0]
    cells = jnp.arange(n)
    filled = row != 0
    slot = jnp.cumsum(filled) - 1  # each tile's place once the gaps are gone
    packed = jnp.sum(jnp.where(filled[:, None] & (slot[:, None] == cells[None, :]), row[:, None], 0), axis=0)
    values, places, gained = [], [], jnp.zeros((), row.dtype)
    write = jnp.int32(0)
    skip = jnp.bool_(False)  # the tile at i was merged into i - 1
    for i in range(n):
        value = packed[i]
        nxt = packed[i + 1] if i + 1 < n else jnp.zeros((), row.dtype)
        live = ~skip & (value != 0)
        merge = live & (value == nxt)
        values.append(jnp.where(live, jnp.where(merge, 2 * value, value), 0))
        places.append(write)
        gained = gained + jnp.where(merge, 2 * value, 0).astype(row.dtype)
        write = write + live.astype(jnp.int32)
        skip = merge
    values, places = jnp.stack(values), jnp.stack(places)
    out = jnp.sum(jnp.where(places[:, None] == cells[None, :], values[:, None], 0), axis=0).astype(row.dtype)
    return out, gained


def _to_left(board: jax.Array, action: int) -> jax.Array:
    """The board turned so that move `action` (a Python int) slides each row toward index 0."""
    if action == 0:  # Up: columns toward row 0
        return board.T
    if action == 1:  # Right
        return board[:, ::-1]
    if action == 2:  # Down
        return board[::-1, :].T
    return board  # Left


def _from_left(board: jax.Array, action: int) -> jax.Array:
    """The inverse of `_to_left`."""
    if action == 0:
        return board.T
    if action == 1:
        return board[:, ::-1]
    if action == 2:
        return board.T[::-1, :]
    return board


def all_moves(board: jax.Array) -> tuple[jax.Array, jax.Array, jax.Array]:
    """The four moves of `board` [N, N] -> (boards [4, N, N], merged sums [4], moved [4] bool), in action order."""
    boards, gains = [], []
    for action in range(4):
        rows, gained = jax.vmap(slide_row_left)(_to_left(board, action))
        boards.append(_from_left(rows, action))
        gains.append(gained.sum())
    boards = jnp.stack(boards)
    return boards, jnp.stack(gains), jnp.any(boards != board[None], axis=(1, 2))


def spawn_tile(key: jax.Array, board: jax.Array, two_prob) -> jax.Array:
    """`board` with a new tile on an empty cell drawn uniformly: 2 with probability two_prob, else 4; unchanged
    when full."""
    cell_key, value_key = jax.random.split(key)
    empty = (board == 0).reshape(-1)
    draw = jnp.where(empty, jax.random.uniform(cell_key, empty.shape), -1.0)
    cell = jnp.argmax(draw)
    value = jnp.where(jax.random.uniform(value_key) < two_prob, 2, 4).astype(board.dtype)
    flat = board.reshape(-1)
    return jnp.where(empty.any(), flat.at[cell].set(value), flat).reshape(board.shape)


def legal_moves(board: jax.Array) -> jax.Array:
    """[4] bool: the moves that change `board`."""
    return all_moves(board)[2]


def no_move_left(board: jax.Array) -> jax.Array:
    """[] bool: no move changes `board` (it is full and no two neighbours are equal); cheaper than legal_moves."""
    across = jnp.any(board[:, 1:] == board[:, :-1])
    down = jnp.any(board[1:, :] == board[:-1, :])
    return jnp.all(board != 0) & ~across & ~down
