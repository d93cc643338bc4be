"""Rotary position embeddings: token positions of right-padded rows, the inverse frequencies (with llama3 / linear
scaling, as transformers), the tables every layer shares, and the rotation."""

from __future__ import annotations

import math
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from ragen_jax.models.config import ModelConfig


def positions_from_mask(attention_mask: jax.Array) -> jax.Array:
    """RoPE positions [B, T] for right-padded rows: 0, 1, ... over real tokens."""
    return jnp.maximum(jnp.cumsum(attention_mask.astype(jnp.int32), axis=-1) - 1, 0)


def rope_inv_freq(config: ModelConfig) -> np.ndarray:
    """Inverse RoPE frequencies [head_dim // 2] in float32, with llama3/linear scaling as in transformers."""
    dim = config.head_dim
    inv = (1.0 / (np.float32(config.rope_theta) ** (np.arange(0, dim, 2, dtype=np.float32) / np.float32(dim))))
    inv = inv.astype(np.float32)
    params = config.rope_params
    kind = params.get("rope_type", "default")
    if kind == "linear":
        return (inv / np.float32(params["factor"])).astype(np.float32)
    if kind == "llama3":
        factor = np.float32(params["factor"])
        low, high = np.float32(params["low_freq_factor"]), np.float32(params["high_freq_factor"])
        old_len = np.float32(params["original_max_position_embeddings"])
        wavelen = np.float32(2 * math.pi) / inv
        scaled = np.where(wavelen > old_len / low, inv / factor, inv).astype(np.float32)
        smooth = (old_len / wavelen - low) / (high - low)
        smoothed = (1 - smooth) * scaled / factor + smooth * scaled
        medium = ~(wavelen < old_len / high) & ~(wavelen > old_len / low)
        return np.where(medium, smoothed, scaled).astype(np.float32)
    return inv


def rope_tables(positions: jax.Array, inv_freq: np.ndarray, dtype: Any) -> tuple[jax.Array, jax.Array]:
    """(cos, sin) [B, T, 1, hd] in dtype for positions [B, T]: the rotate-half tables every layer shares.

    A forward makes them once (`Decoder`): sin and cos are evaluated on the hd/2 distinct frequencies and, for more
    than one token, materialised, so XLA reads them instead of fusing a copy of the transcendental into each of the
    layers' forward and backward RoPE fusions (24 evaluations of [B, T, hd] per tiny-update micro-batch before)."""
    freqs = positions.astype(jnp.float32)[..., None] * jnp.asarray(inv_freq)[None, None, :]  # [B, T, hd/2]
    cos, sin = (jnp.concatenate([f, f], axis=-1)[:, :, None, :].astype(dtype) for f in (jnp.cos(freqs), jnp.sin(freqs)))
    if positions.shape[1] > 1:
        cos, sin = jax.lax.optimization_barrier((cos, sin))
    return cos, sin


def apply_rope(x: jax.Array, cos: jax.Array, sin: jax.Array) -> jax.Array:
    """Rotates x [B, T, N, hd] by the tables (cos, sin) [B, T, 1, hd] of `rope_tables` (rotate-half convention, as
    transformers)."""
    half = x.shape[-1] // 2
    rotated = jnp.concatenate([-x[..., half:], x[..., :half]], axis=-1)
    return x * cos + rotated * sin
