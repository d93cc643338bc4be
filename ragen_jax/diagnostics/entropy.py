"""Token entropy of the policy: the per-token H(pi(.|context)) the Echo-Trap warning watches."""

from __future__ import annotations

import chex
import jax
import jax.numpy as jnp


def token_entropy(logits: jax.Array, mask: jax.Array) -> tuple[jax.Array, jax.Array]:
    """logits [B, T, V], mask [B, T] -> (per-row mean entropy [B], masked mean over all tokens [])."""
    chex.assert_rank(logits, 3)
    chex.assert_rank(mask, 2)
    chex.assert_equal_shape_prefix([logits, mask], 2)
    logp = jax.nn.log_softmax(logits.astype(jnp.float32), axis=-1)
    ent = -jnp.sum(jnp.exp(logp) * logp, axis=-1)
    mask = mask.astype(jnp.float32)
    per_row = jnp.sum(ent * mask, axis=-1) / jnp.maximum(jnp.sum(mask, axis=-1), 1.0)
    overall = jnp.sum(ent * mask) / jnp.maximum(jnp.sum(mask), 1.0)
    return per_row, overall
