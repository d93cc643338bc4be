"""Sokoban text observations in RAGEN's formats: the symbol grid and the coordinate block."""

from __future__ import annotations

import numpy as np

from envs.sokoban.generator import BOX, BOX_ON_TARGET, PLAYER, TARGET
from envs.symbols import grid_codes

PLAYER_ON_TARGET = 6
# What each render code is (RAGEN's meaning words, code order).
KINDS = ("wall", "empty", "target", "box on target", "box", "player", "player on target")
# Render code (0..6) -> symbol.
GRID_LOOKUP = {0: "#", 1: "_", 2: "O", 3: "√", 4: "X", 5: "P", 6: "S"}
GRID_VOCAB = {"#": "wall", "_": "empty", "O": "target", "√": "box on target", "X": "box", "P": "player",
              "S": "player on target"}
# RAGEN's SokobanDifferentGridVocab variant.
DIFFERENT_GRID_LOOKUP = {0: "W", 1: ".", 2: "G", 3: "C", 4: "B", 5: "A", 6: "@"}
DIFFERENT_GRID_VOCAB = {"W": "wall", ".": "empty", "G": "target", "C": "box on target", "B": "box", "A": "player",
                        "@": "player on target"}


def render_codes(fixed: np.ndarray, room: np.ndarray) -> np.ndarray:
    """Grid [H, W] of render codes: the room with a player standing on a target as 6."""
    return np.where((room == PLAYER) & (fixed == TARGET), PLAYER_ON_TARGET, room)


def render_grid(fixed: np.ndarray, room: np.ndarray, lookup: dict[int, str] = GRID_LOOKUP) -> str:
    """One row per line, one symbol per cell, no trailing newline."""
    codes = render_codes(np.asarray(fixed), np.asarray(room))
    return "\n".join("".join(lookup[int(c)] for c in row) for row in codes)


def _positions(mask: np.ndarray) -> str:
    return ", ".join(f"({int(r)}, {int(c)})" for r, c in np.argwhere(mask))


def render_coords(fixed: np.ndarray, room: np.ndarray) -> str:
    """RAGEN's coordinate lines (row, col), zero-indexed, row-major; walls and empty kinds omitted."""
    fixed, room = np.asarray(fixed), np.asarray(room)
    rows, cols = room.shape
    lines = [f"Board size: {rows} rows x {cols} cols (zero-indexed)."]
    kinds = [
        ("Targets", fixed == TARGET),
        ("Boxes", room == BOX),
        ("Boxes on target", room == BOX_ON_TARGET),
        ("Player", (room == PLAYER) & (fixed != TARGET)),
        ("Player on target", (room == PLAYER) & (fixed == TARGET)),
    ]
    lines += [f"{label}: {_positions(mask)}" for label, mask in kinds if mask.any()]
    return "\n".join(lines)


def render_text(fixed: np.ndarray, room: np.ndarray, fmt: str, lookup: dict[int, str] = GRID_LOOKUP) -> str:
    """`fmt` is "grid", "coord" or "grid_coord" (coordinate block, then the grid)."""
    if fmt == "grid":
        return render_grid(fixed, room, lookup)
    if fmt == "coord":
        return render_coords(fixed, room)
    if fmt == "grid_coord":
        return "Coordinates: \n" + render_coords(fixed, room) + "\nGrid Map: \n" + render_grid(fixed, room, lookup)
    raise ValueError(f"Unknown Sokoban observation format {fmt!r}; use 'grid', 'coord' or 'grid_coord'.")


def parse_grid(text: str, lookup: dict[int, str] = GRID_LOOKUP) -> tuple[np.ndarray, np.ndarray]:
    """Inverse of `render_grid`: (fixed [H, W], room [H, W]) int8, for hand-built levels in tests and docs."""
    codes = grid_codes(text, lookup, "Sokoban", " ".join(lookup.values()))
    players = int(np.isin(codes, (PLAYER, PLAYER_ON_TARGET)).sum())
    if players != 1:
        found = "no player" if players == 0 else f"{players} players"
        raise ValueError(f"Sokoban grid has {found}; draw exactly one ({lookup[PLAYER]!r}, or "
                         f"{lookup[PLAYER_ON_TARGET]!r} on a target).")
    fixed = np.select([codes == 0, np.isin(codes, (2, 3, PLAYER_ON_TARGET))], [0, TARGET], 1).astype(np.int8)
    room = np.where(codes == PLAYER_ON_TARGET, PLAYER, codes).astype(np.int8)
    return fixed, room
