"""Breadth-first solver for short 2x2 scrambles (numpy, on the host): the warm start's demonstrations.

A table of every cube within `depth` moves of solved (any of the solved cube's whole-cube turns, since RAGEN's
check accepts those) is built once, one vectorised BFS layer at a time; a cube in the table is solved by moving,
each step, to a neighbour one move nearer. Depth 5 holds about 10^5 cubes and builds in well under a second.
"""

from __future__ import annotations

import functools

import numpy as np

from envs.rubikscube import cube


def _keys(stickers: np.ndarray) -> list[bytes]:
    """Hashable keys of cubes [N, 24] int8."""
    return [row.tobytes() for row in np.ascontiguousarray(stickers, np.int8)]


@functools.lru_cache(maxsize=None)
def solved_cubes() -> np.ndarray:
    """[K, 24] int8: every cube RAGEN's check calls solved that the moves reach (the solved cube turned whole;
    a whole-cube turn is two opposite faces turned the same way, e.g. U D')."""
    turns = [cube.compose(cube.MOVES[0], cube.MOVES[3]),  # U D': the whole cube about the U axis
             cube.compose(cube.MOVES[6], cube.MOVES[5]),  # R L'
             cube.compose(cube.MOVES[8], cube.MOVES[11])]  # F B'
    found = {cube.SOLVED.tobytes(): cube.SOLVED}
    frontier = [cube.SOLVED]
    while frontier:
        nxt = []
        for state in frontier:
            for turn in turns:
                other = state[turn]
                if other.tobytes() not in found:
                    found[other.tobytes()] = other
                    nxt.append(other)
        frontier = nxt
    return np.stack(list(found.values())).astype(np.int8)


@functools.lru_cache(maxsize=4)
def distance_table(depth: int) -> dict[bytes, int]:
    """{cube key: fewest moves to a solved cube} for every cube within `depth` moves of one."""
    table = {key: 0 for key in _keys(solved_cubes())}
    frontier = solved_cubes()
    for d in range(1, depth + 1):
        neighbours = frontier[:, cube.MOVES].reshape(-1, cube.NUM_STICKERS)  # [N * 12, 24]
        neighbours = np.unique(neighbours, axis=0)
        fresh = [i for i, key in enumerate(_keys(neighbours)) if key not in table]
        frontier = neighbours[fresh]
        table.update((key, d) for key in _keys(frontier))
        if not len(frontier):
            break
    return table


def solve(stickers: np.ndarray, depth: int = 5) -> list[int] | None:
    """Fewest move ids that solve `stickers` [24]; [] if solved, None if it lies deeper than `depth` moves."""
    table = distance_table(depth)
    state = np.asarray(stickers, np.int8)
    dist = table.get(state.tobytes())
    if dist is None:
        return None
    plan = []
    while dist > 0:
        for a in range(len(cube.MOVE_NAMES)):
            after = state[cube.MOVES[a]]
            if table.get(after.tobytes(), depth + 1) == dist - 1:
                plan.append(a)
                state, dist = after, dist - 1
                break
    return plan
