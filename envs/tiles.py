"""Grid worlds drawn as RGB images inside JAX: one fixed-size sprite per tile kind, looked up cell by cell.

`draw_tiles` is a pure function of the cell codes (jittable, vmappable over a batch of boards); `read_tiles` inverts
it (the nearest sprite per cell), so a test can recover the board from its picture. Sprites are drawn here in numpy
from a few shapes (fills, borders, discs, bricks) at any tile size; each kind has its own colours.
"""

from __future__ import annotations

from typing import Sequence

import chex
import jax
import jax.numpy as jnp
import numpy as np

# Each tile becomes one Qwen2.5-VL image token at 28 px (14-px patches merged 2 x 2), and the image processor keeps
# a board of such tiles at its size (sides multiples of 28 need no resizing).
DEFAULT_TILE = 28
Color = tuple[int, int, int]


def _grid(size: int) -> tuple[np.ndarray, np.ndarray]:
    """Pixel centres (rows, cols) of a size x size tile, in tile units [0, 1)."""
    centres = (np.arange(size) + 0.5) / size
    return np.meshgrid(centres, centres, indexing="ij")


def fill(size: int, color: Color) -> np.ndarray:
    """A tile [S, S, 3] uint8 of one colour."""
    return np.broadcast_to(np.asarray(color, np.uint8), (size, size, 3)).copy()


def speckled(size: int, color: Color, speck: Color, every: int = 5) -> np.ndarray:
    """A fill with a regular pattern of specks (ice, floor texture)."""
    tile = fill(size, color)
    rows, cols = np.indices((size, size))
    tile[((rows * 3 + cols * 2) % every == 0) & (rows % 2 == 0)] = speck
    return tile


def bricks(size: int, brick: Color, mortar: Color) -> np.ndarray:
    """Two rows of bricks per tile, offset by half a brick, with mortar lines."""
    tile = fill(size, brick)
    rows, cols = np.indices((size, size))
    course = rows * 4 // size  # four courses of bricks
    line = (rows * 4) % size < max(1, size // 14)
    joint = ((cols + (course % 2) * size // 4) * 2) % size < max(1, size // 14)
    tile[line | joint] = mortar
    return tile


def square(tile: np.ndarray, color: Color, inset: float, border: float | None = None) -> np.ndarray:
    """tile with a centred square `inset` (fraction of the side) from each edge, filled or, with `border`, only its
    outline `border` thick (fractions)."""
    rows, cols = _grid(tile.shape[0])
    inside = (rows >= inset) & (rows < 1 - inset) & (cols >= inset) & (cols < 1 - inset)
    if border is not None:
        inner = (rows >= inset + border) & (rows < 1 - inset - border) & (cols >= inset + border) & (
            cols < 1 - inset - border)
        inside &= ~inner
    out = tile.copy()
    out[inside] = color
    return out


def disc(tile: np.ndarray, color: Color, radius: float, centre: tuple[float, float] = (0.5, 0.5)) -> np.ndarray:
    """tile with a disc of `radius` (fraction of the side) at `centre`."""
    rows, cols = _grid(tile.shape[0])
    out = tile.copy()
    out[(rows - centre[0]) ** 2 + (cols - centre[1]) ** 2 <= radius ** 2] = color
    return out


def cross(tile: np.ndarray, color: Color, inset: float, width: float) -> np.ndarray:
    """tile with both diagonals of the square `inset` from the edges, `width` thick (a crate's braces)."""
    rows, cols = _grid(tile.shape[0])
    within = (rows >= inset) & (rows < 1 - inset) & (cols >= inset) & (cols < 1 - inset)
    on = (np.abs(rows - cols) < width) | (np.abs(rows + cols - 1) < width)
    out = tile.copy()
    out[within & on] = color
    return out


def sprite_sheet(tiles: Sequence[np.ndarray]) -> np.ndarray:
    """[K, S, S, 3] uint8 from one tile per code 0..K-1; refuses two kinds drawn alike (they could not be told
    apart in the image)."""
    sheet = np.stack([np.asarray(t, np.uint8) for t in tiles])
    for a in range(len(sheet)):
        for b in range(a):
            if np.array_equal(sheet[a], sheet[b]):
                raise ValueError(f"tile kinds {b} and {a} are drawn identically; give each kind its own sprite.")
    return sheet


def draw_tiles(codes: jax.Array, sprites: jax.Array) -> jax.Array:
    """Cell codes [H, W] (0..K-1) -> RGB image [H * S, W * S, 3] uint8 with sprites [K, S, S, 3]."""
    chex.assert_rank(codes, 2)
    chex.assert_rank(sprites, 4)
    h, w = codes.shape
    s = sprites.shape[1]
    cells = jnp.asarray(sprites)[codes.astype(jnp.int32)]  # [H, W, S, S, 3]
    return cells.transpose(0, 2, 1, 3, 4).reshape(h * s, w * s, 3)


def read_tiles(image: jax.Array, sprites: jax.Array) -> jax.Array:
    """Inverse of draw_tiles: image [H * S, W * S, 3] -> codes [H, W] int32, each cell's nearest sprite (L1)."""
    chex.assert_rank(image, 3)
    k, s = sprites.shape[0], sprites.shape[1]
    hs, ws, _ = image.shape
    if hs % s or ws % s:
        raise ValueError(f"image {image.shape} is not whole {s}-pixel tiles.")
    cells = image.reshape(hs // s, s, ws // s, s, 3).transpose(0, 2, 1, 3, 4).astype(jnp.int32)
    distance = jnp.abs(cells[:, :, None] - jnp.asarray(sprites, jnp.int32).reshape(1, 1, k, s, s, 3))
    return jnp.argmin(distance.sum(axis=(3, 4, 5)), axis=-1).astype(jnp.int32)
