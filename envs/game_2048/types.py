"""2048 state and parameters (flax.struct pytrees, vmappable)."""

from __future__ import annotations

import jax
from flax import struct


@struct.dataclass
class Game2048State:
    """board [N, N] int32 tile values (0 empty); score [] int32 RAGEN's running score (sum of merged tiles);
    time [] int32 steps taken (no-op moves too)."""

    board: jax.Array
    score: jax.Array
    time: jax.Array


@struct.dataclass
class Game2048Params:
    """two_prob: chance a new tile is a 2 (else a 4); target_tile: 0 for RAGEN's rule (the game ends only when no
    move is left; success if a 2048 tile stands then), else a tile value whose appearance ends the episode solved;
    max_steps_in_episode: the env's own step cap (0: none, RAGEN's; its rollout's action budget ends episodes)."""

    two_prob: float = 0.9
    target_tile: int = struct.field(pytree_node=False, default=0)
    size: int = struct.field(pytree_node=False, default=4)
    max_steps_in_episode: int = struct.field(pytree_node=False, default=0)
