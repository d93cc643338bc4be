"""Text views of a Sudoku state in the original's three formats: simple, detailed, with_feedback."""

from __future__ import annotations

import numpy as np

from envs.sudoku.board import box_size, find_conflicts, valid_numbers

RENDER_FORMATS = ("simple", "detailed", "with_feedback")
LEGEND = "Legend: [N]=initial cell, N=user-placed, *N*=conflict, .=empty"
# The valid-numbers hint is shown only when this few cells (or fewer) are empty.
HINT_MAX_EMPTY = 10


def format_grid_simple(grid: np.ndarray) -> str:
    """Digits and dots, boxes split by '|' and dashed lines."""
    n = grid.shape[0]
    b = box_size(n)
    lines = []
    for i in range(n):
        if i and i % b == 0:
            lines.append("-" * (n * 2 + b - 1))
        parts = []
        for j in range(n):
            if j and j % b == 0:
                parts.append("|")
            parts.append(str(int(grid[i, j])) if grid[i, j] else ".")
        lines.append(" ".join(parts))
    return "\n".join(lines)


def format_grid_marked(grid: np.ndarray, initial: np.ndarray,
                       conflicts: set[tuple[int, int]]) -> str:
    """Three-character cells: '[N]' given, ' N ' placed, '*N*' in conflict, ' . ' empty."""
    n = grid.shape[0]
    b = box_size(n)
    lines = []
    for i in range(n):
        if i and i % b == 0:
            lines.append("-" * (n * 3 + b - 1))
        row = ""
        for j in range(n):
            if j and j % b == 0:
                row += "| "
            v = int(grid[i, j])
            if v == 0:
                row += " . "
            elif initial[i, j] != 0:
                row += f"[{v}]"
            elif (i, j) in conflicts:
                row += f"*{v}*"
            else:
                row += f" {v} "
        lines.append(row.rstrip())
    return "\n".join(lines)


def render_state(grid: np.ndarray, initial: np.ndarray, fmt: str, feedback: str = "",
                 steps: int = 0, max_steps: int | None = None, show_conflicts: bool = True,
                 show_valid_numbers: bool = True) -> str:
    """The observation text for the current grid [N, N] given the puzzle's initial grid [N, N]."""
    if fmt == "simple":
        return format_grid_simple(grid)
    conflicts = find_conflicts(grid)
    out = ["=" * 50, "SUDOKU PUZZLE", "=" * 50, format_grid_marked(grid, initial, conflicts),
           "", LEGEND]
    if feedback:
        out += ["", feedback]
    if fmt == "detailed":
        return "\n".join(out)
    if show_conflicts and conflicts:
        out += ["", "⚠ CONFLICTS DETECTED:"]
        out += [f"  - Cell ({r + 1},{c + 1}): {int(grid[r, c])}" for r, c in sorted(conflicts)]
    empty = [(int(r), int(c)) for r, c in np.argwhere(grid == 0)]
    if show_valid_numbers and 0 < len(empty) <= HINT_MAX_EMPTY:
        out += ["", "💡 VALID NUMBERS FOR EMPTY CELLS:"]
        for r, c in empty:
            valid = valid_numbers(grid, r, c)
            if initial[r, c] == 0 and valid:
                out.append(f"  - ({r + 1},{c + 1}): {valid}")
    n = grid.shape[0]
    filled = int(np.count_nonzero(grid))
    given = int(np.count_nonzero(initial))
    out += ["", f"Progress: {filled}/{n * n} cells filled ({given} initial, {filled - given} placed)",
            f"Steps: {steps}/{max_steps}" if max_steps is not None else f"Steps: {steps}"]
    return "\n".join(out)
