"""Breadth-first Sokoban solver: shortest action sequences for evaluation ceilings, tests and demos."""

from __future__ import annotations

from collections import deque

import numpy as np

from envs.sokoban.generator import BOX, BOX_ON_TARGET, DELTAS, PLAYER, TARGET, WALL


def solve(fixed: np.ndarray, room: np.ndarray, max_states: int = 2_000_000) -> list[int] | None:
    """Fewest-step action ids (0 Up, 1 Down, 2 Left, 3 Right) solving the level, or None if unsolvable.

    fixed, room [H, W]: gym-sokoban codes. Searches (player, box set) states; pushes into walls or
    other boxes are illegal as in the env; out-of-grid cells count as walls.
    """
    fixed, room = np.asarray(fixed), np.asarray(room)
    rows, cols = room.shape
    padded = np.zeros((rows + 2, cols + 2), np.int8)  # a wall ring so no bounds checks are needed
    padded[1:-1, 1:-1] = fixed
    width = cols + 2
    floor = (padded.reshape(-1) != WALL).tolist()
    targets = frozenset(int(i) for i in np.flatnonzero(padded.reshape(-1) == TARGET))

    def flat(rc: np.ndarray) -> int:
        return int((rc[0] + 1) * width + rc[1] + 1)

    player = flat(np.argwhere(room == PLAYER)[0])
    boxes = frozenset(flat(rc) for rc in np.argwhere((room == BOX) | (room == BOX_ON_TARGET)))
    steps = [dr * width + dc for dr, dc in DELTAS]
    start = (player, boxes)
    if targets <= boxes:
        return []
    parent: dict = {start: None}
    queue = deque([start])
    while queue:
        state = queue.popleft()
        player, boxes = state
        for action, step in enumerate(steps):
            nxt = player + step
            if not floor[nxt]:
                continue
            new_boxes = boxes
            if nxt in boxes:
                beyond = nxt + step
                if not floor[beyond] or beyond in boxes:
                    continue
                new_boxes = (boxes - {nxt}) | {beyond}
            child = (nxt, new_boxes)
            if child in parent:
                continue
            parent[child] = (state, action)
            if targets <= new_boxes:
                return _path(parent, child)
            if len(parent) >= max_states:
                raise RuntimeError(f"Sokoban oracle gave up after {max_states} states; raise max_states.")
            queue.append(child)
    return None


def _path(parent: dict, state: tuple) -> list[int]:
    actions = []
    while parent[state] is not None:
        state, action = parent[state]
        actions.append(action)
    return actions[::-1]
