"""2x2 cube state and parameters (flax.struct pytrees, vmappable)."""

from __future__ import annotations

import jax
from flax import struct


@struct.dataclass
class CubeState:
    """stickers [24] int8 colours (envs.rubikscube.cube's layout); time [] int32 moves made since the scramble."""

    stickers: jax.Array
    time: jax.Array


@struct.dataclass
class CubeParams:
    """scramble_depth: random moves from solved at reset; max_steps_in_episode: RAGEN's max_steps (the episode
    ends, truncated, after that many moves)."""

    scramble_depth: int = struct.field(pytree_node=False, default=5)
    max_steps_in_episode: int = struct.field(pytree_node=False, default=20)
