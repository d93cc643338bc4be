"""FrozenLake boards as RGB images drawn inside JAX, with the tile kinds of RAGEN's grid codes (gymnasium's
rgb_array renderer draws the same): player, frozen ice, hole, goal, player in hole, player on goal."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from envs.frozenlake.render import PLAYER_CODE, TILE_CODE
from envs.frozenlake.types import FrozenLakeState
from envs.tiles import DEFAULT_TILE, disc, draw_tiles, speckled, sprite_sheet, square

ICE_RGB, HOLE_RGB, GOAL_RGB, GOAL_EDGE_RGB, PLAYER_RGB = (200, 230, 250), (25, 45, 95), (245, 200, 40), (
    170, 120, 20), (210, 45, 45)
IMAGE_LEGEND = ("The image shows the lake from above: light blue frozen ice, holes as dark blue discs, the goal as a "
                "yellow square, and you as the red disc.")
# RAGEN's grid code of each of our tiles without the player, and with the player on it (render.py's tables).
_TILE_CODES = np.array([TILE_CODE[t] for t in range(4)], np.int32)
_PLAYER_CODES = np.array([PLAYER_CODE.get(t, 0) for t in range(4)], np.int32)


def frozenlake_sprites(tile: int = DEFAULT_TILE) -> np.ndarray:
    """[6, S, S, 3] uint8: one sprite per RAGEN grid code (0 player, 1 frozen, 2 hole, 3 goal, 4 player in hole,
    5 player on goal)."""
    ice = speckled(tile, ICE_RGB, (255, 255, 255))
    hole = disc(ice, HOLE_RGB, 0.4)
    goal = square(square(ice, GOAL_RGB, 0.15), GOAL_EDGE_RGB, 0.15, border=0.07)
    return sprite_sheet([disc(ice, PLAYER_RGB, 0.28), ice, hole, goal, disc(hole, PLAYER_RGB, 0.2),
                         disc(goal, PLAYER_RGB, 0.28)])


def frozenlake_codes(state: FrozenLakeState) -> jax.Array:
    """RAGEN's grid codes [N, N] int32 of one state (what its text grid draws, cell by cell)."""
    tiles = state.tiles.astype(jnp.int32)
    codes = jnp.asarray(_TILE_CODES)[tiles].reshape(-1)
    player = jnp.asarray(_PLAYER_CODES)[tiles.reshape(-1)[state.pos]]
    return codes.at[state.pos].set(player).reshape(tiles.shape)


def frozenlake_image(state: FrozenLakeState, sprites: np.ndarray) -> jax.Array:
    """One state -> RGB [N * S, N * S, 3] uint8 (pure JAX; jax.vmap it over a batch of states)."""
    return draw_tiles(frozenlake_codes(state), sprites)
