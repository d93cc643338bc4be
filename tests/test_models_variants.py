"""Model variants: bfloat16 parameters/compute, rematerialisation, the value model."""

import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from model_fixtures import CFG, call_model
from ragen_jax.models import CausalLM, ValueModel, init_cache


@pytest.fixture(scope="module")
def model():
    return CausalLM(CFG, rngs=nnx.Rngs(0))


@pytest.mark.slow  # default run: too long for CI's 15 minutes on 2 cores
def test_bfloat16_params_and_compute_run_close_to_float32(model):
    bf = CausalLM(CFG.replace(param_dtype="bfloat16", dtype="bfloat16"), rngs=nnx.Rngs(1))
    nnx.update(bf, jax.tree.map(lambda x: x.astype(jnp.bfloat16), nnx.state(model)))
    assert bf.model.layers[0].mlp.up_proj.kernel[...].dtype == jnp.bfloat16
    tokens = np.arange(24).reshape(2, 12)
    pos = np.broadcast_to(np.arange(12), (2, 12))
    ref, _ = call_model(model, tokens, pos)
    got, _ = call_model(bf, tokens, pos)
    assert got.dtype == jnp.float32
    np.testing.assert_allclose(got, ref, atol=0.01, rtol=0)  # measured max |error| 0.0035 (logits up to 0.6)
    cache = init_cache(bf.config, 2, 16)
    assert all(x.dtype == jnp.bfloat16 for x in cache.k + cache.v)
    _, cache = call_model(bf, tokens, pos, cache=cache, cache_index=jnp.zeros(2, jnp.int32))
    assert all(x.dtype == jnp.bfloat16 for x in cache.k + cache.v)


@pytest.mark.slow  # default run: too long for CI's 15 minutes on 2 cores
def test_remat_keeps_values_and_gradients(model):
    tokens = jnp.arange(16, dtype=jnp.int32).reshape(2, 8)

    @nnx.jit
    @nnx.grad
    def grad(m):
        return m(tokens, tokens % 8)[0].std()

    g_ref = grad(model)
    for policy in ("full", "dots"):
        g_re = grad(CausalLM(CFG.replace(remat=policy), rngs=nnx.Rngs(0)))
        for a, b in zip(jax.tree.leaves(g_ref), jax.tree.leaves(g_re)):
            np.testing.assert_allclose(a, b, atol=1e-6, err_msg=policy)


@pytest.mark.slow  # default run: too long for CI's 15 minutes on 2 cores
def test_value_model_from_causal_lm_shares_backbone_values(model):
    critic = ValueModel.from_causal_lm(model, rngs=nnx.Rngs(1))
    tokens = jnp.arange(10, dtype=jnp.int32)[None]
    h, _ = model.hidden(tokens, tokens)
    values = critic(tokens, tokens)
    assert values.shape == (1, 10) and values.dtype == jnp.float32
    np.testing.assert_allclose(values, critic.score(h)[..., 0], atol=1e-6)
    critic.model.norm.weight[...] = critic.model.norm.weight[...] * 2  # a copy: the policy is unaffected
    assert float(model.model.norm.weight[...].mean()) == 1.0


def test_tiny_preset_computes_in_its_param_dtype_unless_told_otherwise():
    """`--config.model.param_dtype=bfloat16` on the tiny preset used to keep float32 compute (a loaded checkpoint
    computes in its param dtype when `dtype` is unset; the tiny preset now follows the same rule)."""
    from ragen_jax.models.tiny import tiny_config

    assert tiny_config().dtype == "float32"
    assert tiny_config(param_dtype="bfloat16").dtype == "bfloat16"
    assert tiny_config(param_dtype="bfloat16", dtype="float32").dtype == "float32"  # an explicit dtype wins


@pytest.mark.slow  # default run: too long for CI's 15 minutes on 2 cores
@pytest.mark.parametrize("remat", ["none", "full"])
def test_rope_sin_and_cos_are_evaluated_once_per_training_step(remat):
    """The RoPE tables are made once per forward and read by every layer, forward and backward: each of sin and cos
    appears once in the compiled gradient (it used to be fused into each layer's q and k rotations, forward and
    backward: 24 evaluations of [B, T, hd] per tiny-update micro-batch)."""
    graphdef, state = nnx.split(CausalLM(CFG.replace(remat=remat), rngs=nnx.Rngs(0)))
    tokens = jnp.ones((2, 64), jnp.int32)
    positions = jnp.broadcast_to(jnp.arange(64, dtype=jnp.int32), (2, 64))

    def loss(s):
        return jnp.sum(nnx.merge(graphdef, s)(tokens, positions)[0] ** 2)

    text = jax.jit(jax.grad(loss)).lower(state).compile().as_text()
    counts = {op: len(re.findall(rf"\b{op}\(", text)) for op in ("sine", "cosine")}
    assert counts == {"sine": 1, "cosine": 1}, counts
