"""Teacher-forced scoring: log p(token t | tokens < t) from one full forward, for tests and training."""

from __future__ import annotations

import functools

import chex
import jax
import jax.numpy as jnp
from flax import nnx


@functools.partial(jax.jit, static_argnames=("graphdef", "temperature"))
def _score(graphdef, params, tokens, attention_mask, temperature):
    model = nnx.merge(graphdef, params)
    mask = attention_mask.astype(bool)
    positions = jnp.maximum(jnp.cumsum(mask, axis=1) - 1, 0).astype(jnp.int32)
    logits, _ = model(tokens, positions, attention_mask=mask)
    logits = logits[:, :-1].astype(jnp.float32)
    if temperature != 1.0:
        logits = logits / temperature
    picked = jnp.take_along_axis(logits, tokens[:, 1:, None], axis=-1)[..., 0]
    logprobs = picked - jax.nn.logsumexp(logits, axis=-1)
    logprobs = jnp.where(mask[:, 1:] & mask[:, :-1], logprobs, 0.0)
    return jnp.concatenate([jnp.zeros_like(logprobs[:, :1]), logprobs], axis=1)


def score_tokens(graphdef, params, tokens: jax.Array, attention_mask: jax.Array, *,
                 temperature: float = 1.0) -> jax.Array:
    """logprobs [B, T] float32 of tokens [B, T] given the earlier ones (0 at t=0 and where masked).

    attention_mask [B, T] marks real tokens (left or right padding); logits are divided by temperature.
    """
    chex.assert_rank([tokens, attention_mask], 2)
    chex.assert_equal_shape([tokens, attention_mask])
    if not temperature > 0:
        raise ValueError(f"temperature must be > 0, got {temperature}.")
    return _score(graphdef, params, jnp.asarray(tokens, jnp.int32), jnp.asarray(attention_mask), float(temperature))
