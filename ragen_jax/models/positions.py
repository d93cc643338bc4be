"""Token positions of right-padded rows, as the models' rotary embeddings read them."""

from __future__ import annotations

import jax
import jax.numpy as jnp


def positions_from_mask(attention_mask: jax.Array) -> jax.Array:
    """RoPE positions [B, T] for right-padded rows: 0, 1, ... over real tokens."""
    return jnp.maximum(jnp.cumsum(attention_mask.astype(jnp.int32), axis=-1) - 1, 0)
