"""LoRA: unchanged outputs at start, only adapters train, merge gives the same function, export works."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from flax import nnx

from ragen_jax.models import (
    CausalLM, ModelConfig, ValueModel, apply_lora, has_lora, load_model, lora_filter, merge_lora, save_pretrained,
)

CFG = ModelConfig("qwen3", vocab_size=128, hidden_size=32, intermediate_size=64, num_layers=2, num_heads=4,
                  num_kv_heads=2, head_dim=8, qk_norm=True, tie_word_embeddings=True)
TOKENS = jnp.arange(24, dtype=jnp.int32).reshape(2, 12) % 128
POS = jnp.broadcast_to(jnp.arange(12, dtype=jnp.int32), (2, 12))


@nnx.jit
def _logits(model):
    return model(TOKENS, POS)[0]


@nnx.jit
def _step(model, opt):
    def loss(m):
        logits, _ = m(TOKENS, POS)
        return -jnp.mean(jax.nn.log_softmax(logits)[:, :-1].max(-1))

    grads = nnx.grad(loss, argnums=nnx.DiffState(0, lora_filter))(model)
    opt.update(model, grads)


def _train(model, steps=3):
    opt = nnx.Optimizer(model, optax.adam(1e-2), wrt=lora_filter)
    for _ in range(steps):
        _step(model, opt)


@pytest.mark.slow  # default run: too long for CI's 15 minutes on 2 cores
def test_lora_starts_as_identity_and_only_adapters_train():
    model = CausalLM(CFG, rngs=nnx.Rngs(0))
    ref = _logits(model)
    frozen = jax.tree.map(np.asarray, nnx.state(model, nnx.Param))
    apply_lora(model, rank=4, alpha=8.0, rngs=nnx.Rngs(1))
    assert has_lora(model)
    np.testing.assert_allclose(_logits(model), ref, atol=1e-6, rtol=0)
    lora_leaves = jax.tree.leaves(nnx.state(model, lora_filter))
    assert len(lora_leaves) == 2 * 7 * CFG.num_layers
    _train(model)
    assert float(jnp.abs(_logits(model) - ref).max()) > 1e-3
    base_after = dict(nnx.to_flat_state(nnx.state(model, nnx.All(nnx.Param, nnx.Not(lora_filter)))))
    assert set(base_after) == {path for path, _ in nnx.to_flat_state(frozen)}
    for path, value in nnx.to_flat_state(frozen):
        np.testing.assert_array_equal(base_after[path].get_value(), value.get_value(), err_msg=str(path))


@pytest.mark.slow  # default run: too long for CI's 15 minutes on 2 cores
def test_merge_and_export_preserve_the_adapted_function(tmp_path):
    model = CausalLM(CFG, rngs=nnx.Rngs(0))
    apply_lora(model, rank=2, alpha=4.0, target_modules=("q_proj", "v_proj", "down_proj"), rngs=nnx.Rngs(1))
    _train(model, steps=2)
    adapted = _logits(model)
    merged = merge_lora(model)
    assert not has_lora(merged) and has_lora(model)
    np.testing.assert_allclose(_logits(merged), adapted, atol=1e-5)
    save_pretrained(model, tmp_path)
    np.testing.assert_allclose(_logits(load_model(tmp_path)), adapted, atol=1e-5)


def test_unknown_target_is_refused():
    with pytest.raises(ValueError, match="embed"):
        apply_lora(CausalLM(CFG, rngs=nnx.Rngs(0)), 2, 2.0, target_modules=("embed",), rngs=nnx.Rngs(1))


@pytest.mark.slow  # default run: too long for CI's 15 minutes on 2 cores
def test_value_model_from_lora_policy_uses_the_adapted_backbone():
    model = CausalLM(CFG, rngs=nnx.Rngs(0))
    apply_lora(model, rank=4, alpha=8.0, rngs=nnx.Rngs(1))
    _train(model, steps=1)
    critic = ValueModel.from_causal_lm(model, rngs=nnx.Rngs(2))
    assert not has_lora(critic)
    h_policy, _ = model.hidden(TOKENS, POS)
    h_critic, _ = critic.model(TOKENS, POS)
    np.testing.assert_allclose(h_critic, h_policy, atol=1e-5)


@pytest.mark.slow  # default run: too long for CI's 15 minutes on 2 cores
def test_a_lora_critic_keeps_the_base_weights_frozen_and_trains_adapters_and_head():
    """RAGEN's critic under LoRA is a LoRA model (base.yaml critic lora_rank/alpha/target_modules): the policy's base
    weights stay frozen, its adapters (copied) and the value head train."""
    from ragen_jax.trainer.setup import CRITIC_HEAD, split_model

    model = CausalLM(CFG, rngs=nnx.Rngs(0))
    apply_lora(model, rank=4, alpha=8.0, target_modules=("q_proj", "down_proj"), rngs=nnx.Rngs(1))
    _train(model, steps=1)
    critic = ValueModel.from_causal_lm(model, rngs=nnx.Rngs(2), keep_lora=True)
    assert has_lora(critic)
    h_policy, _ = model.hidden(TOKENS, POS)
    h_critic, _ = critic.model(TOKENS, POS)
    np.testing.assert_allclose(h_critic, h_policy, atol=1e-5)  # the same adapted backbone
    split = split_model(critic, lora=True, head=CRITIC_HEAD)
    trained = {"/".join(map(str, p)) for p, _ in nnx.to_flat_state(split.trainable)}
    assert trained == {p for p in trained if "lora_" in p or p.startswith("score/")}
    assert {"score/kernel", "score/bias"} <= trained and any("down_proj/lora_b" in p for p in trained)
    frozen = {"/".join(map(str, p)) for p, _ in nnx.to_flat_state(split.frozen)}
    assert "model/layers/0/self_attn/q_proj/kernel" in frozen and not any("lora_" in p for p in frozen)
    # the copy is the critic's own: training the policy's adapters further leaves it
    before = np.asarray(critic.model.layers[0].mlp.down_proj.lora_b[...]).copy()
    _train(model, steps=1)
    np.testing.assert_array_equal(critic.model.layers[0].mlp.down_proj.lora_b[...], before)
    with pytest.raises(ValueError, match="keep_lora=True needs"):
        ValueModel.from_causal_lm(CausalLM(CFG, rngs=nnx.Rngs(0)), rngs=nnx.Rngs(2), keep_lora=True)


def test_all_linear_targets_every_projection_as_peft_does():
    """PEFT's `all-linear` (RAGEN's default target_modules) wraps every Linear of the decoder layers, not lm_head."""
    from ragen_jax.models.lora import parse_target_modules

    model = CausalLM(CFG, rngs=nnx.Rngs(0))
    apply_lora(model, rank=2, alpha=4.0, target_modules=parse_target_modules("all-linear"), rngs=nnx.Rngs(1))
    assert len(jax.tree.leaves(nnx.state(model, lora_filter))) == 2 * 7 * CFG.num_layers
