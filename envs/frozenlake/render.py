"""FrozenLake text observations in RAGEN's formats."""

from __future__ import annotations

import numpy as np

from envs.frozenlake.generator import GOAL, HOLE, START

GRID_VOCAB = {"P": "player", "_": "empty", "O": "hole", "G": "goal", "X": "player in hole", "√": "player on goal"}
_TILE_SYMBOL = {0: "_", 1: "O", 2: "_", 3: "G"}


def render_grid(tiles: np.ndarray, pos: int) -> str:
    """One row per line; P player, X player in hole, √ player on goal; no trailing newline."""
    tiles = np.asarray(tiles)
    cols = tiles.shape[1]
    cells = [[_TILE_SYMBOL[int(t)] for t in row] for row in tiles]
    r, c = divmod(int(pos), cols)
    cells[r][c] = {HOLE: "X", GOAL: "√"}.get(int(tiles[r, c]), "P")
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


def render_text(tiles: np.ndarray, pos: int, fmt: str) -> str:
    """`fmt` is "grid", "coord" or "grid_coord" (coordinate block, then the grid)."""
    if fmt == "grid":
        return render_grid(tiles, pos)
    if fmt == "coord":
        return render_coords(tiles, pos)
    if fmt == "grid_coord":
        return "Coordinates: \n" + render_coords(tiles, pos) + "\nGrid Map: \n" + render_grid(tiles, pos)
    raise ValueError(f"Unknown FrozenLake observation format {fmt!r}; use 'grid', 'coord' or 'grid_coord'.")
