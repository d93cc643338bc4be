"""Per-row stop conditions: EOS tokens and stop sequences matched on the generated tokens only."""

from __future__ import annotations

import chex
import jax
import jax.numpy as jnp

from ragen_jax.sampling.config import SamplingConfig

NOT_STOPPED, LENGTH, EOS, STOP_SEQUENCE, INACTIVE = 0, 0, 1, 2, -1


def stop_reason(generated: jax.Array, step: jax.Array, token: jax.Array, config: SamplingConfig) -> jax.Array:
    """Why each row stops at `step` ([] or per row [B]): generated [B, N] (row b's column step[b] holds
    token [B]) -> [B] int32.

    0 = keep going, 1 = token is an EOS id (checked first), 2 = the last k generated tokens equal a stop sequence.
    """
    chex.assert_rank([generated, token], [2, 1])
    step = jnp.broadcast_to(jnp.asarray(step, jnp.int32), token.shape)
    eos = jnp.zeros(token.shape, bool)
    for eos_id in config.eos_ids:
        eos = eos | (token == eos_id)
    stop = jnp.zeros(token.shape, bool)
    for seq in config.stop_sequences:
        k = len(seq)
        if k > generated.shape[1]:
            continue
        cols = jnp.maximum(step[:, None] - k + 1 + jnp.arange(k)[None, :], 0)
        window = jnp.take_along_axis(generated, cols, axis=1)
        match = jnp.all(window == jnp.asarray(seq, generated.dtype)[None, :], axis=1)
        stop = stop | (match & (step + 1 >= k))
    return jnp.where(eos, EOS, jnp.where(stop, STOP_SEQUENCE, NOT_STOPPED)).astype(jnp.int32)
