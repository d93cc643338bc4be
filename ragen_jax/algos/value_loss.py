"""Critic losses (per token), registered in VALUE_LOSSES.

Signature: ``fn(vpreds, old_values, returns, response_mask, **hparams) -> (loss [B, T],
metrics)``; aggregate with ``aggregation.agg_loss``.
"""

from __future__ import annotations

import chex
import jax
import jax.numpy as jnp

from ragen_jax.algos.masked import masked_mean
from ragen_jax.algos.registry import VALUE_LOSSES


def _check(vpreds, old_values, returns, response_mask) -> None:
    chex.assert_rank([vpreds, old_values, returns, response_mask], 2)
    chex.assert_equal_shape([vpreds, old_values, returns, response_mask])


@VALUE_LOSSES.register("clipped")
def clipped_value_loss(vpreds: jax.Array, old_values: jax.Array, returns: jax.Array,
                       response_mask: jax.Array, *,
                       cliprange_value: float = 0.5) -> tuple[jax.Array, dict[str, jax.Array]]:
    """0.5 * max((v - R)^2, (clip(v, v_old +- eps) - R)^2) per token (veRL/PPO value clipping)."""
    _check(vpreds, old_values, returns, response_mask)
    returns = jax.lax.stop_gradient(returns)
    old_values = jax.lax.stop_gradient(old_values)
    v_clipped = jnp.clip(vpreds, old_values - cliprange_value, old_values + cliprange_value)
    loss_unclipped = jnp.square(vpreds - returns)
    loss_clipped = jnp.square(v_clipped - returns)
    loss = 0.5 * jnp.maximum(loss_unclipped, loss_clipped)
    metrics = {"vf_clipfrac": masked_mean((loss_clipped > loss_unclipped).astype(jnp.float32), response_mask),
               "vpred_mean": masked_mean(vpreds, response_mask)}
    return jnp.where(response_mask.astype(bool), loss, 0.0), metrics


@VALUE_LOSSES.register("mse")
def mse_value_loss(vpreds: jax.Array, old_values: jax.Array, returns: jax.Array,
                   response_mask: jax.Array) -> tuple[jax.Array, dict[str, jax.Array]]:
    """0.5 * (v - R)^2 per token, no clipping."""
    _check(vpreds, old_values, returns, response_mask)
    loss = 0.5 * jnp.square(vpreds - jax.lax.stop_gradient(returns))
    return jnp.where(response_mask.astype(bool), loss, 0.0), {"vpred_mean": masked_mean(vpreds, response_mask)}
