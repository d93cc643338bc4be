"""Decode weights: the projections laid out [out, in] for the decode loop's few-row GEMMs compute the same
function (logits and cache) as the model's own layout, for tied and untied heads, q/k bias and norm, and LoRA."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from ragen_jax.models import CausalLM, ModelConfig, apply_lora, init_cache
from ragen_jax.models.linear import OutFirstLinear
from ragen_jax.models.transformer import PROJECTIONS, decode_weights, with_decode_weights

QWEN2_UNTIED = ModelConfig("qwen2", vocab_size=96, hidden_size=32, intermediate_size=48, num_layers=2, num_heads=4,
                           num_kv_heads=2, head_dim=8, attention_bias=True, tie_word_embeddings=False)
QWEN3_TIED = ModelConfig("qwen3", vocab_size=96, hidden_size=32, intermediate_size=48, num_layers=2, num_heads=4,
                         num_kv_heads=2, head_dim=8, qk_norm=True, tie_word_embeddings=True)


def _model(cfg, lora):
    model = CausalLM(cfg, rngs=nnx.Rngs(0))
    if lora:
        apply_lora(model, rank=4, alpha=8.0, rngs=nnx.Rngs(1))
        for path, var in nnx.iter_graph(model):  # non-zero adapters, so a merge that drops them would show
            if isinstance(var, nnx.LoRAParam):
                var.value = 0.2 * jax.random.normal(jax.random.key(len(path)), var.value.shape)
    return nnx.split(model)


@pytest.mark.slow  # default run: too long for CI's 15 minutes on 2 cores
@pytest.mark.parametrize("cfg,lora", [(QWEN2_UNTIED, False), (QWEN3_TIED, False), (QWEN2_UNTIED, True)],
                         ids=["qwen2-untied", "qwen3-tied", "qwen2-lora"])
def test_decode_steps_with_decode_weights_equal_the_models_own(cfg, lora):
    graphdef, params = _model(cfg, lora)
    rng = np.random.RandomState(0)
    prompt = jnp.asarray(rng.randint(1, cfg.vocab_size, (3, 6)), jnp.int32)
    cache_index = jnp.zeros(3, jnp.int32)
    positions = jnp.broadcast_to(jnp.arange(6), (3, 6))
    _, cache = nnx.merge(graphdef, params)(prompt, positions, cache=init_cache(cfg, 3, 16), cache_index=cache_index)

    @jax.jit
    def steps(params, weights, cache):
        model = nnx.merge(graphdef, params)
        if weights is not None:
            model = with_decode_weights(model, weights)
        outs = []
        for t in range(3):  # three single-token steps from slot 6 on
            token = jnp.full((3, 1), 5 + t, jnp.int32)
            logits, cache = model(token, jnp.full((3, 1), 6 + t, jnp.int32), cache=cache,
                                  cache_index=jnp.full(3, 6 + t, jnp.int32))
            outs.append(logits)
        return jnp.concatenate(outs, 1), cache

    weights = jax.jit(lambda p: decode_weights(nnx.merge(graphdef, p)))(params)
    want_logits, want_cache = steps(params, None, cache)
    got_logits, got_cache = steps(params, weights, cache)
    np.testing.assert_allclose(got_logits, want_logits, atol=2e-5, rtol=1e-5)
    np.testing.assert_allclose(got_cache.k, want_cache.k, atol=2e-6)
    np.testing.assert_allclose(got_cache.v, want_cache.v, atol=2e-6)


def test_decode_weights_are_every_projection_transposed():
    graphdef, params = _model(QWEN2_UNTIED, False)
    model = nnx.merge(graphdef, params)
    weights = decode_weights(model)
    names = {f"{i}.{block}.{name}" for i in range(2) for block, names in PROJECTIONS.items() for name in names}
    assert set(weights) == names | {"lm_head"}
    np.testing.assert_array_equal(weights["1.mlp.down_proj"], model.model.layers[1].mlp.down_proj.kernel[...].T)
    np.testing.assert_array_equal(weights["lm_head"], model.lm_head.kernel[...].T)
    with_decode_weights(model, weights)
    assert isinstance(model.model.layers[0].self_attn.q_proj, OutFirstLinear)
    assert model.model.layers[0].self_attn.q_proj.bias is not None  # Qwen2's q/k/v bias is kept
    assert model.model.layers[0].self_attn.o_proj.bias is None
    tied = decode_weights(nnx.merge(*_model(QWEN3_TIED, False)))
    assert "lm_head" not in tied  # a tied head reads the embedding, laid out [V, D] already
