"""The 2x2 cube's stickers and moves as permutations (numpy tables; used by the JAX env and the host solver).

Stickers: 24, face by face in RAGEN's order U, L, F, R, B, D, four per face read row by row ([0 1] over [2 3]);
colour c of the solved cube is face c's index (RAGEN's W, O, G, R, B, Y). A move is a gather permutation:
`stickers[MOVES[a]]` is the cube after move a. Move ids are RAGEN's 1..12 minus one: U, U', D, D', L, L', R, R',
F, F', B, B' (a prime is three quarter-turns).
"""

from __future__ import annotations

import numpy as np

FACES = ("U", "L", "F", "R", "B", "D")
FACE_NAMES = ("Up", "Left", "Front", "Right", "Back", "Down")
COLOURS = ("W", "O", "G", "R", "B", "Y")
MOVE_NAMES = ("U", "U'", "D", "D'", "L", "L'", "R", "R'", "F", "F'", "B", "B'")
NUM_STICKERS = 24
SOLVED = np.repeat(np.arange(6, dtype=np.int8), 4)  # [24]

# A clockwise quarter-turn of each face, as RAGEN's sticker layout defines it: the turned face's own stickers,
# then the four edge strips it carries around. Each entry (destination stickers, source stickers): after the
# turn, destination[i] holds what source[i] held before.
_QUARTER_TURNS = {
    "U": ((8, 9, 12, 13, 16, 17, 4, 5), (12, 13, 16, 17, 4, 5, 8, 9)),
    "D": ((10, 11, 6, 7, 18, 19, 14, 15), (6, 7, 18, 19, 14, 15, 10, 11)),
    "L": ((0, 2, 19, 17, 20, 22, 8, 10), (19, 17, 20, 22, 8, 10, 0, 2)),
    "R": ((1, 3, 9, 11, 21, 23, 18, 16), (9, 11, 21, 23, 18, 16, 1, 3)),
    "F": ((2, 3, 7, 5, 21, 20, 12, 14), (7, 5, 21, 20, 12, 14, 2, 3)),
    "B": ((0, 1, 13, 15, 22, 23, 6, 4), (13, 15, 22, 23, 6, 4, 0, 1)),
}


def _quarter_turn(face: str) -> np.ndarray:
    """Gather permutation [24] of a clockwise quarter-turn of `face`."""
    perm = np.arange(NUM_STICKERS)
    base = 4 * FACES.index(face)
    # the face itself turns: top-left <- bottom-left, top-right <- top-left, bottom-right <- top-right, ...
    perm[[base, base + 1, base + 3, base + 2]] = [base + 2, base, base + 1, base + 3]
    destination, source = _QUARTER_TURNS[face]
    perm[list(destination)] = list(source)
    return perm


def compose(*perms: np.ndarray) -> np.ndarray:
    """The gather permutation of applying `perms` in order (the first first)."""
    out = np.arange(NUM_STICKERS)
    for perm in perms:
        out = out[perm]
    return out


def _move_table() -> np.ndarray:
    rows = []
    for face in ("U", "D", "L", "R", "F", "B"):
        quarter = _quarter_turn(face)
        rows += [quarter, compose(quarter, quarter, quarter)]
    return np.stack(rows).astype(np.int32)


MOVES = _move_table()  # [12, 24] in move-id order
INVERSE = np.array([a + 1 if a % 2 == 0 else a - 1 for a in range(12)], np.int32)  # U <-> U', ...


def apply_moves(stickers: np.ndarray, moves) -> np.ndarray:
    """`stickers` [24] after the move ids `moves` in order."""
    for a in moves:
        stickers = stickers[MOVES[int(a)]]
    return stickers


def is_solved(stickers: np.ndarray) -> bool:
    """RAGEN's check: every face shows one colour (whichever: a turned whole cube counts)."""
    faces = np.asarray(stickers).reshape(6, 4)
    return bool(np.all(faces == faces[:, :1]))
