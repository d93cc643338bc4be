"""Seeded Sudoku puzzles with exactly one solution.

The full grid comes from randomized backtracking (first empty cell in row-major order, candidate
order shuffled at each visit) and the holes from a shuffled cell list, drawing from
`random.Random(seed)` in the same order as the original, so a seed gives the original's puzzle
whenever that puzzle is unique. Unlike the original, uniqueness is enforced: if removing the
first k shuffled cells leaves several solutions, cells are removed one at a time in that order,
skipping any removal that would make the solution ambiguous.
"""

from __future__ import annotations

import random

import numpy as np

from envs.sudoku.board import count_solutions, is_valid_placement

# Fraction of cells removed per difficulty (the original's table).
REMOVAL_FRACTION = {"easy": 0.4, "medium": 0.5, "hard": 0.6}
SUPPORTED_SIZES = (4, 9)
_MAX_GRIDS = 20


def cells_to_remove(difficulty: str, grid_size: int = 9) -> int:
    """Holes in a puzzle: 32 (easy) or 40 (medium) on 9x9, i.e. the placements needed to finish."""
    if difficulty not in REMOVAL_FRACTION:
        raise ValueError(f"difficulty must be one of {sorted(REMOVAL_FRACTION)}, got {difficulty!r}.")
    return int(grid_size * grid_size * REMOVAL_FRACTION[difficulty])


def generate_puzzle(seed: int, difficulty: str = "easy",
                    grid_size: int = 9) -> tuple[np.ndarray, np.ndarray]:
    """(puzzle [N, N], solution [N, N]) int arrays for integer `seed`; 0 marks an empty cell."""
    if grid_size not in SUPPORTED_SIZES:
        raise ValueError(f"grid_size must be one of {SUPPORTED_SIZES}, got {grid_size}.")
    k = cells_to_remove(difficulty, grid_size)
    rng = random.Random(seed)
    for _ in range(_MAX_GRIDS):
        solution = np.zeros((grid_size, grid_size), dtype=np.int64)
        _fill(solution, rng)
        order = [(i, j) for i in range(grid_size) for j in range(grid_size)]
        rng.shuffle(order)
        puzzle = _remove_keeping_unique(solution, order, k)
        if puzzle is not None:
            return puzzle, solution
    raise RuntimeError(f"Could not make a unique {difficulty} puzzle for seed {seed}.")


def _fill(grid: np.ndarray, rng: random.Random) -> bool:
    empty = np.argwhere(grid == 0)
    if len(empty) == 0:
        return True
    row, col = (int(x) for x in empty[0])
    candidates = list(range(1, grid.shape[0] + 1))
    rng.shuffle(candidates)
    for num in candidates:
        if is_valid_placement(grid, row, col, num):
            grid[row, col] = num
            if _fill(grid, rng):
                return True
            grid[row, col] = 0
    return False


def _remove_keeping_unique(solution: np.ndarray, order: list[tuple[int, int]],
                           k: int) -> np.ndarray | None:
    puzzle = solution.copy()
    for r, c in order[:k]:
        puzzle[r, c] = 0
    if count_solutions(puzzle, limit=2) == 1:
        return puzzle
    puzzle = solution.copy()
    removed = 0
    for r, c in order:
        if removed == k:
            break
        puzzle[r, c] = 0
        if count_solutions(puzzle, limit=2) == 1:
            removed += 1
        else:
            puzzle[r, c] = solution[r, c]
    return puzzle if removed == k else None
