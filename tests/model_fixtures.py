"""A small random Qwen2 config and a jitted call helper shared by the model tests (no torch needed)."""

import jax
import jax.numpy as jnp
from flax import nnx

from ragen_jax.models import ModelConfig

CFG = ModelConfig("qwen2", vocab_size=256, hidden_size=64, intermediate_size=128, num_layers=2, num_heads=4,
                  num_kv_heads=2, head_dim=16, attention_bias=True)


def call_model(model, tokens, positions, **kw):
    """model(tokens, positions, **kw) through jax.jit over the split state."""
    graphdef, state = nnx.split(model)
    fn = jax.jit(lambda s, t, p, kw: nnx.merge(graphdef, s)(t, p, **kw))
    return fn(state, jnp.asarray(tokens, jnp.int32), jnp.asarray(positions, jnp.int32), kw)
