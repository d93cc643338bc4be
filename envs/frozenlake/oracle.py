"""Breadth-first FrozenLake solver (deterministic moves): shortest path to the goal avoiding holes."""

from __future__ import annotations

from collections import deque

import numpy as np

from envs.frozenlake.generator import DELTAS, GOAL, HOLE


def solve(tiles: np.ndarray, pos: int) -> list[int] | None:
    """Fewest action ids (0 Left, 1 Down, 2 Right, 3 Up) from flat cell `pos` to the goal; None if cut off.

    With slippery ice this is the plan for intended moves (the evaluation ceiling at success_rate 1).
    """
    tiles = np.asarray(tiles)
    rows, cols = tiles.shape
    start = int(pos)
    if tiles.flat[start] == GOAL:
        return []
    parent = {start: None}
    queue = deque([start])
    while queue:
        cell = queue.popleft()
        if tiles.flat[cell] == HOLE:
            continue
        r, c = divmod(cell, cols)
        for action, (dr, dc) in enumerate(DELTAS):
            nr, nc = r + dr, c + dc
            if not (0 <= nr < rows and 0 <= nc < cols):
                continue
            nxt = nr * cols + nc
            if nxt in parent or tiles[nr, nc] == HOLE:
                continue
            parent[nxt] = (cell, action)
            if tiles[nr, nc] == GOAL:
                actions = []
                while parent[nxt] is not None:
                    nxt, a = parent[nxt]
                    actions.append(a)
                return actions[::-1]
            queue.append(nxt)
    return None
