"""Masked statistics over token grids (mean, unbiased variance, whitening)."""

from __future__ import annotations

import chex
import jax
import jax.numpy as jnp


def masked_sum(x: jax.Array, mask: jax.Array, axis=None) -> jax.Array:
    """Sum of ``x`` where ``mask`` is set; ``x`` and ``mask`` broadcast together."""
    return jnp.sum(jnp.where(mask.astype(bool), x, 0.0), axis=axis)


def masked_mean(x: jax.Array, mask: jax.Array, axis=None) -> jax.Array:
    """Mean of ``x`` over masked entries (0 when nothing is masked in)."""
    count = jnp.sum(mask.astype(x.dtype), axis=axis)
    return masked_sum(x, mask, axis) / jnp.maximum(count, 1.0)


def masked_var(x: jax.Array, mask: jax.Array, unbiased: bool = True) -> jax.Array:
    """Variance over all masked entries; Bessel-corrected like veRL (guarded for n <= 1)."""
    mean = masked_mean(x, mask)
    var = masked_mean(jnp.square(x - mean), mask)
    if unbiased:
        n = jnp.sum(mask.astype(x.dtype))
        var = var * n / jnp.maximum(n - 1.0, 1.0)
    return var


def masked_whiten(x: jax.Array, mask: jax.Array, eps: float = 1e-8) -> jax.Array:
    """(x - mean) / sqrt(var + eps) with statistics over masked entries; zero outside the mask."""
    chex.assert_equal_shape([x, mask])
    mean = masked_mean(x, mask)
    var = masked_var(x, mask)
    return jnp.where(mask.astype(bool), (x - mean) * jax.lax.rsqrt(var + eps), 0.0)
