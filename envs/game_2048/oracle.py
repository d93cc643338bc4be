"""A corner heuristic for 2048 on the host (numpy): the warm start's demonstrations.

Each turn it looks one move ahead: among the legal moves it keeps the largest tile in the top-left corner if it
can, then takes the larger merge, then the board with more empty cells, then Left before Up before Right before
Down (the corner strategy's order). The numpy slide here is written apart from the JAX rules (envs.game_2048.rules)
so tests can check one against the other.
"""

from __future__ import annotations

import numpy as np

UP, RIGHT, DOWN, LEFT = 0, 1, 2, 3
PREFERENCE = (LEFT, UP, RIGHT, DOWN)


def slide_line(line) -> tuple[list[int], int]:
    """A line (list of tile values) slid toward its start -> (new line, merged sum); RAGEN's rule: each pair of
    equal neighbours (after removing gaps) merges once, scanning from the start."""
    tiles = [int(v) for v in line if v]
    out, gained, i = [], 0, 0
    while i < len(tiles):
        if i + 1 < len(tiles) and tiles[i] == tiles[i + 1]:
            out.append(2 * tiles[i])
            gained += 2 * tiles[i]
            i += 2
        else:
            out.append(tiles[i])
            i += 1
    return out + [0] * (len(line) - len(out)), gained


def move(board: np.ndarray, action: int) -> tuple[np.ndarray, int, bool]:
    """(board after `action` (0 Up, 1 Right, 2 Down, 3 Left), merged sum, whether it changed) without a new tile."""
    board = np.asarray(board)
    view = {UP: board.T, RIGHT: board[:, ::-1], DOWN: board[::-1, :].T, LEFT: board}[action]
    rows, gained = [], 0
    for line in view:
        new, g = slide_line(list(line))
        rows.append(new)
        gained += g
    slid = np.array(rows, board.dtype)
    out = {UP: slid.T, RIGHT: slid[:, ::-1], DOWN: slid.T[::-1, :], LEFT: slid}[action]
    return out, gained, not np.array_equal(out, board)


def corner_move(board: np.ndarray) -> int | None:
    """The heuristic's move for `board` [N, N]; None when no move changes it (the game is over)."""
    best, best_key = None, None
    for rank, action in enumerate(PREFERENCE):
        after, gained, moved = move(board, action)
        if not moved:
            continue
        key = (after[0, 0] == after.max(), gained, int((after == 0).sum()), -rank)
        if best_key is None or key > best_key:
            best, best_key = action, key
    return best
