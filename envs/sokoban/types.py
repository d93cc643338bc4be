"""Sokoban state and parameters (flax.struct pytrees, vmappable)."""

from __future__ import annotations

import jax
from flax import struct


@struct.dataclass
class SokobanState:
    """One episode. Cell codes as gym-sokoban: 0 wall, 1 floor, 2 target, 3 box on target, 4 box, 5 player.

    fixed [H, W] int8: walls/floor/targets; room [H, W] int8: the current grid; player [2] int32 (row, col).
    """

    fixed: jax.Array
    room: jax.Array
    player: jax.Array
    boxes_on_target: jax.Array  # [] int32
    solved: jax.Array  # [] bool
    time: jax.Array  # [] int32: steps taken (gymnax truncates at max_steps_in_episode)
    level_id: jax.Array  # [] int32: index in the level bank (-1 for a hand-built level)


@struct.dataclass
class SokobanParams:
    """A level bank [N, H, W] to sample from on `reset`, and the step cap."""

    fixed_bank: jax.Array
    room_bank: jax.Array
    max_steps_in_episode: int = struct.field(pytree_node=False, default=100)
