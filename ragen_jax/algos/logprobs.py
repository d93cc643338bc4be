"""Log-probs and entropy of target tokens, chunked over T so [B, T, V] logits never exist.

Each chunk of ``chunk_size`` positions computes its [B, C, V] logits and reduces them to
log p(target) and entropy. When all chunks' logits would be large, each chunk is rematerialised in
the backward pass (jax.checkpoint), so peak memory holds one chunk of logits instead of all of them.
"""

from __future__ import annotations

import chex
import jax
import jax.numpy as jnp

from ragen_jax.shapes import even_chunk


def _logprob_entropy(logits: jax.Array, targets: jax.Array) -> tuple[jax.Array, jax.Array]:
    targets = jnp.clip(targets, 0, logits.shape[-1] - 1)  # e.g. -100 padding: finite, mask it out
    log_z = jax.nn.logsumexp(logits, axis=-1)
    target_logits = jnp.take_along_axis(logits, targets[..., None], axis=-1)[..., 0]
    probs = jax.nn.softmax(logits, axis=-1)
    entropy = log_z - jnp.sum(probs * logits, axis=-1)
    return target_logits - log_z, entropy


def logprobs_from_logits(logits: jax.Array, targets: jax.Array,
                         temperature: float = 1.0) -> tuple[jax.Array, jax.Array]:
    """Unchunked reference: logits [B, T, V], targets [B, T] -> (logprobs, entropy) [B, T] f32."""
    chex.assert_rank([logits, targets], [3, 2])
    chex.assert_equal_shape_prefix([logits, targets], 2)
    logits = logits.astype(jnp.float32) / temperature
    return _logprob_entropy(logits, targets)


REMAT_LOGITS_BYTES = 1 << 28  # keep every chunk's logits for the backward pass below this (256 MiB)


def token_logprobs_and_entropy(hidden: jax.Array, head: jax.Array, targets: jax.Array, *,
                               chunk_size: int = 128, temperature: float = 1.0,
                               remat: bool | None = None) -> tuple[jax.Array, jax.Array]:
    """log p(targets) and entropy under logits = hidden @ head / temperature, chunked over T.

    hidden [B, T, D], head [D, V], targets [B, T] int -> (logprobs [B, T], entropy [B, T]) f32.
    T need not divide chunk_size: the chunks are evened (`shapes.even_chunk`) and the tail is padded. Gradients
    flow to hidden and head.
    remat: recompute each chunk's logits in the backward pass instead of keeping them; None decides by size
    (the [B, T, V] float32 logits above REMAT_LOGITS_BYTES), so small vocabularies skip the recomputation.
    """
    chex.assert_rank([hidden, head, targets], [3, 2, 2])
    chex.assert_equal_shape_prefix([hidden, targets], 2)
    chex.assert_axis_dimension(head, 0, hidden.shape[-1])
    if chunk_size < 1:
        raise ValueError(f"chunk_size must be >= 1, got {chunk_size}.")
    b, t, d = hidden.shape
    c = even_chunk(t, chunk_size)  # 300 positions in chunks of 256 are 2 x 150, not 2 x 256
    n = -(-t // c)
    pad = n * c - t
    hidden = jnp.pad(hidden, ((0, 0), (0, pad), (0, 0)))
    targets = jnp.pad(targets, ((0, 0), (0, pad)))
    hidden_chunks = hidden.reshape(b, n, c, d).swapaxes(0, 1)  # [n, B, C, D]
    target_chunks = targets.reshape(b, n, c).swapaxes(0, 1)  # [n, B, C]

    def one_chunk(h: jax.Array, y: jax.Array) -> tuple[jax.Array, jax.Array]:
        # [B*C, D] rows, not [B, C, D]: the head's weight gradient is then one GEMM with no transposed copy of
        # the logits' gradient (ragen_jax/models/linear.py)
        logits = jnp.dot(h.reshape(-1, d), head, preferred_element_type=jnp.float32).reshape(*h.shape[:-1], -1)
        return _logprob_entropy(logits / temperature, y)

    if remat is None:
        remat = b * n * c * head.shape[1] * 4 > REMAT_LOGITS_BYTES
    if remat:
        one_chunk = jax.checkpoint(one_chunk)

    logprobs, entropy = jax.lax.map(lambda xs: one_chunk(*xs), (hidden_chunks, target_chunks))
    unchunk = lambda x: x.swapaxes(0, 1).reshape(b, n * c)[:, :t]  # noqa: E731
    return unchunk(logprobs), unchunk(entropy)
