"""Parse a Sudoku answer ("place 5 at row 2 col 3", "2,3,5", ...) into a 0-based placement."""

from __future__ import annotations

import dataclasses
import re

# Longer answers are rejected unparsed, which keeps parsing time bounded on any model text.
MAX_ACTION_CHARS = 500

# (pattern, value comes first). The first four name the value first; the last two are row,col,value.
_PATTERNS = [
    (re.compile(r"place\s+(\d+)\s+at\s+row\s+(\d+)\s+col\s+(\d+)"), True),
    (re.compile(r"place\s+(\d+)\s+at\s+\((\d+),\s*(\d+)\)"), True),
    (re.compile(r"place\s+(\d+)\s+at\s+(\d+),\s*(\d+)"), True),
    (re.compile(r"(\d+)\s+at\s+(\d+),\s*(\d+)"), True),
    (re.compile(r"\((\d+),\s*(\d+),\s*(\d+)\)"), False),
    (re.compile(r"(\d+),\s*(\d+),\s*(\d+)"), False),
]


@dataclasses.dataclass(frozen=True)
class Placement:
    """A parsed action: put `num` at 0-based (`row`, `col`)."""

    row: int
    col: int
    num: int


def parse_action(text: str, grid_size: int = 9) -> Placement | str:
    """A Placement, or the error message shown to the model (the original's wording)."""
    action = text.strip().lower()
    if len(action) > MAX_ACTION_CHARS:
        return (f"Action is too long ({len(action)} characters, at most {MAX_ACTION_CHARS}). "
                f"Expected format: 'place 5 at row 2 col 3' or '2,3,5'")
    for pattern, value_first in _PATTERNS:
        match = pattern.search(action)
        if match is None:
            continue
        a, b, c = (int(g) for g in match.groups())
        num, row, col = (a, b, c) if value_first else (c, a, b)
        if not 1 <= row <= grid_size:
            return f"Row {row} is out of range (1-{grid_size})"
        if not 1 <= col <= grid_size:
            return f"Column {col} is out of range (1-{grid_size})"
        if not 1 <= num <= grid_size:
            return f"Number {num} is out of range (1-{grid_size})"
        return Placement(row=row - 1, col=col - 1, num=num)
    return (f"Could not parse action: '{action}'. "
            f"Expected format: 'place 5 at row 2 col 3' or '2,3,5'")
