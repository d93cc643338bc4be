"""Shared helpers for the sampler tests: a tiny random model with sharp logits and right-padded prompts."""

import jax
import numpy as np
from flax import nnx

from ragen_jax.models import CausalLM, ModelConfig

PAD = 0
CFG = ModelConfig(
    architecture="qwen2", vocab_size=256, hidden_size=64, intermediate_size=128, num_layers=2,
    num_heads=4, num_kv_heads=2, head_dim=16, attention_bias=True,
)


def sharp_model():
    """(graphdef, params) of a CFG model whose logits are sharper than the 0.02 init gives, so greedy and top-k
    decisions are not near-ties."""
    lm = CausalLM(CFG, rngs=nnx.Rngs(0))
    lm.model.embed_tokens.embedding.value = jax.random.normal(jax.random.key(1), (CFG.vocab_size, CFG.hidden_size))
    lm.lm_head.kernel.value = 0.3 * jax.random.normal(jax.random.key(2), (CFG.hidden_size, CFG.vocab_size))
    return nnx.split(lm)


def prompts(rng, lens, width=None):
    """Right-padded random prompts [len(lens), width] int32 and their lengths."""
    width = width or max(lens)
    toks = np.full((len(lens), width), PAD, np.int32)
    for b, n in enumerate(lens):
        toks[b, :n] = rng.randint(1, CFG.vocab_size, n)
    return toks, np.asarray(lens, np.int32)
