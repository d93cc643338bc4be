"""FrozenLake text observations in RAGEN's formats."""

from __future__ import annotations

import numpy as np

from envs.frozenlake.generator import FROZEN, GOAL, HOLE, START
from envs.symbols import grid_codes

# RAGEN's grid codes (its grid_lookup keys) and what each is, in code order.
KINDS = ("player", "empty", "hole", "goal", "player in hole", "player on goal")
GRID_LOOKUP = {0: "P", 1: "_", 2: "O", 3: "G", 4: "X", 5: "√"}
GRID_VOCAB = {"P": "player", "_": "empty", "O": "hole", "G": "goal", "X": "player in hole", "√": "player on goal"}
TILE_CODE = {0: 1, HOLE: 2, START: 1, GOAL: 3}  # our tile -> RAGEN's grid code (the start is drawn as frozen)
PLAYER_CODE = {HOLE: 4, GOAL: 5}  # the player's tile -> its grid code (0 elsewhere)


def render_grid(tiles: np.ndarray, pos: int, lookup: dict[int, str] = GRID_LOOKUP) -> str:
    """One row per line in `lookup`'s symbols (by default P player, _ frozen, O hole, G goal, X player in hole,
    √ player on goal); no trailing newline."""
    tiles = np.asarray(tiles)
    cols = tiles.shape[1]
    cells = [[lookup[TILE_CODE[int(t)]] for t in row] for row in tiles]
    r, c = divmod(int(pos), cols)
    cells[r][c] = lookup[PLAYER_CODE.get(int(tiles[r, c]), 0)]
    return "\n".join("".join(row) for row in cells)


def _positions(mask: np.ndarray) -> str:
    return ", ".join(f"({int(r)}, {int(c)})" for r, c in np.argwhere(mask))


def render_coords(tiles: np.ndarray, pos: int) -> str:
    """Board size, then Start, Goal, the player line and Holes as (row, col), row-major."""
    tiles = np.asarray(tiles)
    rows, cols = tiles.shape
    r, c = divmod(int(pos), cols)
    player_label = {HOLE: "Player in hole", GOAL: "Player on goal"}.get(int(tiles[r, c]), "Player")
    lines = [f"Board size: {rows} rows x {cols} cols (zero-indexed)."]
    if (tiles == START).any():
        lines.append(f"Start: {_positions(tiles == START)}")
    if (tiles == GOAL).any():
        lines.append(f"Goal: {_positions(tiles == GOAL)}")
    lines.append(f"{player_label}: ({r}, {c})")
    if (tiles == HOLE).any():
        lines.append(f"Holes: {_positions(tiles == HOLE)}")
    return "\n".join(lines)


def render_text(tiles: np.ndarray, pos: int, fmt: str, lookup: dict[int, str] = GRID_LOOKUP) -> str:
    """`fmt` is "grid", "coord" or "grid_coord" (coordinate block, then the grid)."""
    if fmt == "grid":
        return render_grid(tiles, pos, lookup)
    if fmt == "coord":
        return render_coords(tiles, pos)
    if fmt == "grid_coord":
        return "Coordinates: \n" + render_coords(tiles, pos) + "\nGrid Map: \n" + render_grid(tiles, pos, lookup)
    raise ValueError(f"Unknown FrozenLake observation format {fmt!r}; use 'grid', 'coord' or 'grid_coord'.")


# The inverse of the two maps above: RAGEN's grid code -> our tile under it (the start reads as frozen ice).
_CODE_TILE = {0: FROZEN, **{code: tile for tile, code in TILE_CODE.items() if tile != START},
              **{code: tile for tile, code in PLAYER_CODE.items()}}
_PLAYER_CODES = (0, *PLAYER_CODE.values())
_GOAL_CODES = tuple(code for code, tile in _CODE_TILE.items() if tile == GOAL)


def parse_grid(text: str, lookup: dict[int, str] = GRID_LOOKUP) -> tuple[np.ndarray, int]:
    """Inverse of `render_grid`: (tiles [N, N] int8, flat player cell). The grid does not draw the start: it is put
    under a player on frozen ice (a read grid begins an episode where the player stands). ValueError names an
    unknown symbol (row, col), a ragged or non-square board, or a board without exactly one player and one goal."""
    names = ", ".join(f"{symbol!r} ({KINDS[code]})" for code, symbol in lookup.items())
    codes = grid_codes(text, lookup, "FrozenLake", names)
    if codes.shape[0] != codes.shape[1]:
        raise ValueError(f"FrozenLake grid has {codes.shape[0]} rows of {codes.shape[1]} cells; the board is square.")
    players = np.flatnonzero(np.isin(codes, _PLAYER_CODES))
    if len(players) != 1:
        raise ValueError(f"FrozenLake grid has {len(players)} player cells; draw exactly one ({lookup[0]!r}, or "
                         f"{lookup[PLAYER_CODE[HOLE]]!r} in a hole, or {lookup[PLAYER_CODE[GOAL]]!r} on the goal).")
    goals = int(np.isin(codes, _GOAL_CODES).sum())
    if goals != 1:
        raise ValueError(f"FrozenLake grid has {goals} goal cells; draw exactly one ({lookup[TILE_CODE[GOAL]]!r}, "
                         f"or {lookup[PLAYER_CODE[GOAL]]!r} with the player on it).")
    tiles = np.vectorize(_CODE_TILE.__getitem__, otypes=[np.int8])(codes)
    pos = int(players[0])
    cell = divmod(pos, tiles.shape[1])
    if tiles[cell] == FROZEN:
        tiles[cell] = START
    return tiles, pos
