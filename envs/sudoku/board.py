"""Sudoku board rules on numpy grids [N, N] (0 = empty): validity, conflicts, solution counting."""

from __future__ import annotations

import math

import numpy as np


def box_size(n: int) -> int:
    """Side of one box: 3 for a 9x9 grid."""
    return math.isqrt(n)


def box_origin(row: int, col: int, n: int) -> tuple[int, int]:
    b = box_size(n)
    return (row // b) * b, (col // b) * b


def conflict_units(grid: np.ndarray, row: int, col: int, num: int) -> list[str]:
    """Units ("row 2", "column 3", "box (1,1)", 1-based) already holding `num`; [] = valid."""
    n = grid.shape[0]
    b = box_size(n)
    r0, c0 = box_origin(row, col, n)
    units = []
    if num in grid[row, :]:
        units.append(f"row {row + 1}")
    if num in grid[:, col]:
        units.append(f"column {col + 1}")
    if num in grid[r0:r0 + b, c0:c0 + b]:
        units.append(f"box ({r0 // b + 1},{c0 // b + 1})")
    return units


def is_valid_placement(grid: np.ndarray, row: int, col: int, num: int) -> bool:
    """`num` does not already appear in the row, column or box of (row, col)."""
    return not conflict_units(grid, row, col, num)


def valid_numbers(grid: np.ndarray, row: int, col: int) -> list[int]:
    """Sorted numbers placeable at empty (row, col); [] for a filled cell."""
    n = grid.shape[0]
    if grid[row, col] != 0:
        return []
    b = box_size(n)
    r0, c0 = box_origin(row, col, n)
    used = set(grid[row, :].tolist()) | set(grid[:, col].tolist())
    used |= set(grid[r0:r0 + b, c0:c0 + b].ravel().tolist())
    return [v for v in range(1, n + 1) if v not in used]


def find_conflicts(grid: np.ndarray) -> set[tuple[int, int]]:
    """Cells whose (non-zero) value repeats within their row, column or box."""
    n = grid.shape[0]
    b = box_size(n)
    cells: set[tuple[int, int]] = set()
    units = [[(r, c) for c in range(n)] for r in range(n)]
    units += [[(r, c) for r in range(n)] for c in range(n)]
    units += [[(r0 + i, c0 + j) for i in range(b) for j in range(b)]
              for r0 in range(0, n, b) for c0 in range(0, n, b)]
    for unit in units:
        seen: dict[int, list[tuple[int, int]]] = {}
        for r, c in unit:
            v = int(grid[r, c])
            if v:
                seen.setdefault(v, []).append((r, c))
        for positions in seen.values():
            if len(positions) > 1:
                cells.update(positions)
    return cells


def is_solved(grid: np.ndarray) -> bool:
    """Every cell filled and no unit repeats a number."""
    return bool(np.all(grid != 0)) and not find_conflicts(grid)


def count_solutions(grid: np.ndarray, limit: int = 2) -> int:
    """Number of completions of `grid`, counting at most `limit` (2 answers "is it unique?")."""
    n = grid.shape[0]
    b = box_size(n)
    full = (1 << (n + 1)) - 2  # bits 1..n
    rows, cols, boxes = [0] * n, [0] * n, [0] * n
    empty = []
    for r in range(n):
        for c in range(n):
            v = int(grid[r, c])
            k = (r // b) * b + c // b
            if v == 0:
                empty.append((r, c, k))
                continue
            bit = 1 << v
            if rows[r] & bit or cols[c] & bit or boxes[k] & bit:
                return 0
            rows[r] |= bit
            cols[c] |= bit
            boxes[k] |= bit

    def search(remaining: list[tuple[int, int, int]]) -> int:
        if not remaining:
            return 1
        best_i, best_mask, best_count = -1, 0, n + 1
        for i, (r, c, k) in enumerate(remaining):
            mask = full & ~(rows[r] | cols[c] | boxes[k])
            count = mask.bit_count()
            if count < best_count:
                best_i, best_mask, best_count = i, mask, count
                if count <= 1:
                    break
        if best_count == 0:
            return 0
        r, c, k = remaining[best_i]
        rest = remaining[:best_i] + remaining[best_i + 1:]
        total = 0
        mask = best_mask
        while mask and total < limit:
            bit = mask & -mask
            mask ^= bit
            rows[r] |= bit
            cols[c] |= bit
            boxes[k] |= bit
            total += search(rest)
            rows[r] ^= bit
            cols[c] ^= bit
            boxes[k] ^= bit
        return total

    return min(search(empty), limit)
