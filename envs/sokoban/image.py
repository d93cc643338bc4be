"""Sokoban boards as RGB images drawn inside JAX, with the tile kinds of RAGEN's rgb_array renderer (gym-sokoban's):
wall, floor, target, box on target, box, player, player on target, in render-code order (`render.KINDS`)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from envs.sokoban.generator import PLAYER, TARGET
from envs.sokoban.render import PLAYER_ON_TARGET
from envs.sokoban.types import SokobanState
from envs.tiles import DEFAULT_TILE, bricks, cross, disc, draw_tiles, speckled, sprite_sheet, square

FLOOR_RGB, TARGET_RGB, PLAYER_RGB = (40, 40, 40), (220, 40, 40), (60, 120, 235)
BOX_RGB, BOX_EDGE_RGB, BOX_ON_TARGET_RGB, BOX_ON_TARGET_EDGE_RGB = (205, 140, 50), (120, 75, 20), (70, 170, 70), (
    30, 100, 30)
# What the picture shows, for the instruction of the image formats.
IMAGE_LEGEND = ("The image shows the board from above: brick walls, dark floor, targets as red outlined squares, boxes "
                "as orange crates (green once on a target), and you as the blue disc.")


def _crate(floor: np.ndarray, body, edge) -> np.ndarray:
    tile = square(floor, body, 0.1)
    return cross(square(tile, edge, 0.1, border=0.08), edge, 0.1, 0.05)


def sokoban_sprites(tile: int = DEFAULT_TILE) -> np.ndarray:
    """[7, S, S, 3] uint8: one sprite per render code (0 wall, 1 floor, 2 target, 3 box on target, 4 box, 5 player,
    6 player on target)."""
    floor = speckled(tile, FLOOR_RGB, (60, 60, 60))
    target = square(floor, TARGET_RGB, 0.2, border=0.08)
    return sprite_sheet([
        bricks(tile, (150, 70, 50), (100, 100, 100)),
        floor,
        target,
        _crate(floor, BOX_ON_TARGET_RGB, BOX_ON_TARGET_EDGE_RGB),
        _crate(floor, BOX_RGB, BOX_EDGE_RGB),
        disc(floor, PLAYER_RGB, 0.3),
        disc(target, PLAYER_RGB, 0.3),
    ])


def sokoban_codes(state: SokobanState) -> jax.Array:
    """Render codes [H, W] int8 of one state: the room, a player standing on a target as PLAYER_ON_TARGET."""
    on_target = (state.room == PLAYER) & (state.fixed == TARGET)
    return jnp.where(on_target, jnp.int8(PLAYER_ON_TARGET), state.room)


def sokoban_image(state: SokobanState, sprites: np.ndarray) -> jax.Array:
    """One state -> RGB [H * S, W * S, 3] uint8 (pure JAX; jax.vmap it over a batch of states)."""
    return draw_tiles(sokoban_codes(state), sprites)
