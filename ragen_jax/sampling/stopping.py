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

    0 = keep going, 1 = token is an EOS id (checked first), 2 = the last k generated tokens equal a stop sequence
    (with `config.stop_after`, one that a gate sequence ended before).
    """
    chex.assert_rank([generated, token], [2, 1])
    step = jnp.broadcast_to(jnp.asarray(step, jnp.int32), token.shape)
    eos = jnp.zeros(token.shape, bool)
    for eos_id in config.eos_ids:
        eos = eos | (token == eos_id)
    gate_ends = _first_gate_end(generated, step, config.stop_after) if config.stop_after else None
    stop = jnp.zeros(token.shape, bool)
    for seq in config.stop_sequences:
        k = len(seq)
        if k > generated.shape[1]:
            continue
        cols = jnp.maximum(step[:, None] - k + 1 + jnp.arange(k)[None, :], 0)
        window = jnp.take_along_axis(generated, cols, axis=1)
        match = jnp.all(window == jnp.asarray(seq, generated.dtype)[None, :], axis=1) & (step + 1 >= k)
        if gate_ends is not None:
            match = match & (gate_ends <= step - k)  # the gate closed before this window began
        stop = stop | match
    return jnp.where(eos, EOS, jnp.where(stop, STOP_SEQUENCE, NOT_STOPPED)).astype(jnp.int32)


def _first_gate_end(generated: jax.Array, step: jax.Array, gates: tuple[tuple[int, ...], ...]) -> jax.Array:
    """The column [B] where the first gate sequence generated so far (columns <= step [B]) ends; N (past every
    column) for rows without one. generated [B, N] int32."""
    n = generated.shape[1]
    first = jnp.full(step.shape, n, jnp.int32)
    for gate in gates:
        k = len(gate)
        if k > n:
            continue
        match = jnp.ones((generated.shape[0], n - k + 1), bool)
        for i, tok in enumerate(gate):  # match[:, c]: the gate spans columns c .. c + k - 1
            match = match & (generated[:, i:n - k + 1 + i] == tok)
        ends = jnp.arange(k - 1, n, dtype=jnp.int32)[None, :]
        match = match & (ends <= step[:, None])
        first = jnp.minimum(first, jnp.min(jnp.where(match, ends, n), axis=1))
    return first
