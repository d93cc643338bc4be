"""Short, input-dependent "thinking" for demonstrations: where things stand relative to each other.

Used by the reasoning warm start (`warmstart.reasoning="state"`), so a tiny model learns to write reasoning that
depends on its input: what RAGEN-2's mutual-information diagnostics measure.
"""

from __future__ import annotations

import numpy as np


def relation(a, b) -> str:
    """Where cell a [2] (row, col) lies seen from cell b: "above", "below left", ..., or "here"."""
    dr, dc = int(a[0]) - int(b[0]), int(a[1]) - int(b[1])
    vertical = "above" if dr < 0 else "below" if dr > 0 else ""
    horizontal = "left" if dc < 0 else "right" if dc > 0 else ""
    return " ".join(w for w in (vertical, horizontal) if w) or "here"


def nearest(cells: np.ndarray, to) -> np.ndarray:
    """The cell of cells [N, 2] closest (Manhattan, first on ties) to `to` [2]."""
    return cells[int(np.argmin(np.abs(cells - np.asarray(to)).sum(axis=1)))]
