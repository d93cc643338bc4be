"""FrozenLake state and parameters (flax.struct pytrees, vmappable)."""

from __future__ import annotations

import jax
from flax import struct


@struct.dataclass
class FrozenLakeState:
    """tiles [N, N] int8 (0 frozen, 1 hole, 2 start, 3 goal); pos [] int32 flat player cell.

    The episode's random draws are part of its state (fixed at reset), so a seed fixes the whole episode."""

    tiles: jax.Array
    pos: jax.Array
    time: jax.Array  # [] int32: steps taken
    slips: jax.Array  # [max_steps] int8: the turn (-1, 0 or +1, mod 4) step `time` adds to its intended move


@struct.dataclass
class FrozenLakeParams:
    """Map distribution and dynamics: frozen probability p, intended-move probability success_rate."""

    p: float = 0.9
    success_rate: float = 1.0
    size: int = struct.field(pytree_node=False, default=4)
    max_steps_in_episode: int = struct.field(pytree_node=False, default=100)
