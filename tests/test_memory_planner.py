"""The memory planner against XLA's own accounting of a compiled train step, exact parameter/KV-cache bytes,
and its refusal message for plans that cannot fit."""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import optax
import pytest
from flax import nnx

import sharding_testlib as L
from ragen_jax.models import CausalLM, ModelConfig, init_cache
from ragen_jax.models.tiny import tiny_config
from ragen_jax.sharding.memory import MemoryPlanError, estimate_memory
from ragen_jax.sharding.planning import check_plan, measured_bytes
from ragen_jax.trainer.setup import split_model
from ragen_jax.trainer.steps import make_step_fns

GiB = 1024**3
MEDIUM = dict(hidden_size=512, intermediate_size=1408, num_layers=8, num_heads=8, num_kv_heads=4, head_dim=64,
              vocab_size=4096)
QWEN25_3B = ModelConfig(architecture="qwen2", vocab_size=151936, hidden_size=2048, intermediate_size=11008,
                        num_layers=36, num_heads=16, num_kv_heads=2, head_dim=128, tie_word_embeddings=True,
                        attention_bias=True)


def compiled_step_bytes(config: ModelConfig, micro: int, seq_len: int, chunk: int = 16) -> int:
    """Per-device bytes XLA reserves for the trainer's actor update (AdamW, 2 micro-batches), compiled abstractly."""
    actor = split_model(nnx.eval_shape(lambda: CausalLM(config, rngs=nnx.Rngs(0))), False)
    tx = optax.chain(optax.clip_by_global_norm(1.0), optax.adamw(1e-3))
    fns = make_step_fns(actor.graphdef, None, dataclasses.replace(L.algo(), logprob_chunk=chunk), tx, None, micro)
    spec = lambda dt: jax.ShapeDtypeStruct((2 * micro, seq_len), dt)  # noqa: E731
    batch = dict(tokens=spec(jnp.int32), attention_mask=spec(jnp.int32), loss_mask=spec(jnp.float32),
                 old_logprobs=spec(jnp.float32), sample_logprobs=spec(jnp.float32), advantages=spec(jnp.float32))
    opt = jax.eval_shape(tx.init, actor.trainable)
    return measured_bytes(fns["actor_update"].lower(actor.trainable, opt, actor.frozen, batch).compile())


def _estimate(config: ModelConfig, micro: int, seq_len: int):
    return estimate_memory(config, micro_batch_size=micro, mini_batch_size=2 * micro, seq_len=seq_len,
                           logprob_chunk=16)


@pytest.mark.slow  # default run: too long for CI's 15 minutes on 2 cores
def test_tiny_estimate_within_20_percent_of_compiled():
    config = tiny_config()
    measured = compiled_step_bytes(config, micro=4, seq_len=64)
    estimate = _estimate(config, 4, 64).training_peak
    assert abs(estimate - measured) / measured < 0.2, (estimate, measured)


@pytest.mark.slow
def test_long_rows_estimate_within_20_percent_and_memory_is_linear_in_length():
    """Blockwise attention: 4x the row length costs ~4x the bytes (dense [T, T] scores made it ~11x), and the
    planner follows XLA at both lengths; and with a vocabulary large enough that log-prob chunks are
    rematerialised rather than kept (algos.logprobs.REMAT_LOGITS_BYTES)."""
    config = tiny_config()
    short, long = compiled_step_bytes(config, micro=4, seq_len=512), compiled_step_bytes(config, micro=4, seq_len=2048)
    assert long < 4.5 * short, (short, long)
    big_vocab = tiny_config(vocab_size=32000)
    cases = ((config, 512, short), (config, 2048, long), (big_vocab, 1024, compiled_step_bytes(big_vocab, 4, 1024)))
    for cfg, seq_len, measured in cases:
        estimate = _estimate(cfg, 4, seq_len).training_peak
        assert abs(estimate - measured) / measured < 0.2, (cfg.vocab_size, seq_len, estimate, measured)


@pytest.mark.slow
@pytest.mark.parametrize("micro,seq_len", [(4, 128), (8, 256)])
def test_medium_estimate_within_20_percent_of_compiled(micro, seq_len):
    config = tiny_config(**MEDIUM)
    measured = compiled_step_bytes(config, micro=micro, seq_len=seq_len)
    estimate = _estimate(config, micro, seq_len).training_peak
    assert abs(estimate - measured) / measured < 0.2, (estimate, measured)


def test_params_and_cache_are_exact():
    config = tiny_config(**MEDIUM)
    model = nnx.eval_shape(lambda: CausalLM(config, rngs=nnx.Rngs(0)))
    nbytes = sum(x.size * x.dtype.itemsize for x in jax.tree.leaves(nnx.state(model)))
    plan = estimate_memory(config, micro_batch_size=8, seq_len=128, rollout_batch_size=16, cache_len=256)
    assert plan.params == nbytes and plan.grads == nbytes and plan.optimizer == 2 * nbytes
    cache = jax.eval_shape(lambda: init_cache(config, 16, 256))
    assert plan.kv_cache == sum(x.size * x.dtype.itemsize for x in jax.tree.leaves(cache))
    # fsdp=4 x tensor=2 splits every matrix 8 ways (norms stay whole); batch rows split over data x fsdp
    sharded = estimate_memory(config, micro_batch_size=8, seq_len=128, rollout_batch_size=16, cache_len=256,
                              mesh_shape=(1, 4, 2))
    assert nbytes / 8 <= sharded.params < nbytes / 8 * 1.01
    assert sharded.kv_cache == plan.kv_cache // 8
    assert sharded.activations < plan.activations / 4


def test_bf16_lora_and_remat_shrink_the_plan():
    small = QWEN25_3B.replace(num_layers=2)
    base = estimate_memory(small, micro_batch_size=8, seq_len=2048, mesh_shape=(1, 8, 1))
    bf16 = estimate_memory(small, micro_batch_size=8, seq_len=2048, mesh_shape=(1, 8, 1),
                           param_dtype="bfloat16", compute_dtype="bfloat16", optimizer_dtype="float32")
    assert bf16.params * 2 == pytest.approx(base.params, rel=1e-6)
    assert bf16.optimizer * 2 == base.optimizer * 3  # float32 moments and the float32 master copy of bf16 weights
    lora = estimate_memory(small, micro_batch_size=8, seq_len=2048, mesh_shape=(1, 8, 1), lora_rank=16)
    assert lora.optimizer < base.optimizer / 50 and lora.grads < base.grads / 50
    full = estimate_memory(small, micro_batch_size=8, seq_len=2048, mesh_shape=(1, 8, 1), remat="full")
    dots = estimate_memory(small, micro_batch_size=8, seq_len=2048, mesh_shape=(1, 8, 1), remat="dots")
    assert full.activations < dots.activations < base.activations and full.activations < 0.7 * base.activations


@pytest.mark.slow  # default run: too long for CI's 15 minutes on 2 cores
def test_refuses_activation_bound_plan_naming_micro_batch_and_remat():
    plan = estimate_memory(QWEN25_3B, micro_batch_size=64, seq_len=4096, mesh_shape=(1, 8, 1))
    assert 3.0e9 * 4 / 8 < plan.params < 3.2e9 * 4 / 8  # Qwen2.5-3B: 3.09B parameters, fsdp over 8
    with pytest.raises(MemoryPlanError) as err:
        check_plan(plan, 80 * GiB)
    msg = str(err.value)
    assert "micro_batch_size" in msg and "remat" in msg and "activations" in msg and "GiB" in msg


def test_refuses_state_bound_plan_naming_mesh_dtype_and_lora():
    plan = estimate_memory(QWEN25_3B, micro_batch_size=1, seq_len=256, with_critic=True, with_reference=True)
    with pytest.raises(MemoryPlanError) as err:
        check_plan(plan, 24 * GiB)
    msg = str(err.value)
    assert "mesh.fsdp" in msg and "bfloat16" in msg and "lora" in msg.lower()
    assert "micro_batch_size" not in msg


def test_fitting_plan_passes_and_bad_batch_is_named():
    plan = estimate_memory(tiny_config(), micro_batch_size=8, seq_len=128)
    assert check_plan(plan, 16 * GiB) is plan and check_plan(plan, None) is plan
    with pytest.raises(MemoryPlanError, match="micro_batch_size of 6 rows"):
        estimate_memory(tiny_config(), micro_batch_size=6, seq_len=128, mesh_shape=(2, 2, 2))


def test_optimizer_state_dtype_float32_for_bfloat16_params():
    """state_dtype='float32': bf16 parameters keep float32 AdamW moments, and the update keeps the dtypes."""
    from ragen_jax.optim import make_optimizer
    cfg = dict(lr=1e-2, weight_decay=0.01, b1=0.9, b2=0.999, eps=1e-8, warmup_steps=0, schedule="constant",
               grad_clip=1.0, state_dtype="float32")
    params = {"w": jnp.full((4,), 3.0, jnp.bfloat16)}
    tx, _ = make_optimizer(cfg, 10)
    state = tx.init(params)
    dtypes = {x.dtype for x in jax.tree.leaves(state) if x.ndim}
    assert dtypes == {jnp.dtype(jnp.float32)}
    updates, new_state = tx.update({"w": jnp.full((4,), 0.5, jnp.bfloat16)}, state, params)
    assert jax.tree.map(lambda x: x.dtype, new_state) == jax.tree.map(lambda x: x.dtype, state)
    new_params = optax.apply_updates(params, updates)
    assert new_params["w"].dtype == jnp.bfloat16 and float(new_params["w"][0]) < 3.0
    tx_default, _ = make_optimizer(dict(cfg, state_dtype=""), 10)
    assert {x.dtype for x in jax.tree.leaves(tx_default.init(params)) if x.ndim} == {jnp.dtype(jnp.bfloat16)}


@pytest.mark.parametrize("tied", [True, False])
def test_decode_weights_add_exactly_their_bytes_to_sampling(tied):
    from ragen_jax.models.transformer import decode_weights

    config = tiny_config(**MEDIUM, tie_word_embeddings=tied)
    weights = jax.eval_shape(lambda: decode_weights(CausalLM(config, rngs=nnx.Rngs(0))))
    nbytes = sum(x.size * x.dtype.itemsize for x in jax.tree.leaves(weights))
    kw = dict(micro_batch_size=8, seq_len=128, rollout_batch_size=16, cache_len=256, sampling_layout="training")
    plain, laid = estimate_memory(config, **kw), estimate_memory(config, **kw, decode_weights=True)
    assert laid.sampling_params - plain.sampling_params == nbytes
    assert laid.training_peak == plain.training_peak


def test_logit_estimate_pads_to_the_same_evened_chunks_as_the_log_probs():
    """301 tokens (300 targets) in chunks of at most 256 are 2 x 150, as `token_logprobs_and_entropy` cuts them:
    the estimate counts 300 positions of kept logits, not 512."""
    from ragen_jax.sharding import memory

    cfg = tiny_config()
    kept = memory._logit_bytes(cfg, rows=2, global_rows=2, seq_len=301, tensor=1, chunk=256)
    assert kept == int(memory._KEPT_LOGIT_COPIES * 2 * 300 * cfg.vocab_size * 4)


@pytest.mark.parametrize("mesh", [(1, 1, 1), (8, 1, 1), (1, 4, 2)], ids=str)
def test_sampling_copy_counts_only_the_arrays_resharded(mesh):
    """reshard_for_sampling's device_put leaves an array already laid out as asked in place (no copy): without
    fsdp the sampling layout is the training one and costs nothing; with it only the fsdp-split matrices get a
    second copy, whole along fsdp (at tensor=2, half of each per device), while norms and biases stay."""
    config = tiny_config(**MEDIUM)
    model = nnx.eval_shape(lambda: CausalLM(config, rngs=nnx.Rngs(0)))
    leaves = jax.tree.leaves(nnx.state(model))
    plan = estimate_memory(config, micro_batch_size=8, seq_len=128, rollout_batch_size=16, cache_len=256,
                           mesh_shape=mesh)
    data, fsdp, tensor = mesh
    matrices = sum(x.size * x.dtype.itemsize for x in leaves if x.ndim == 2)
    assert plan.sampling_params == (matrices // tensor if fsdp > 1 else 0)


def test_the_plan_sizes_the_kv_cache_for_the_larger_of_the_rollout_and_validation_batches():
    """The validation engine allocates its own cache (in turn with the rollout's); a validation batch larger than the
    rollout's, or padded to split over the mesh, was left out of the plan."""
    from configs import sokoban
    from ragen_jax.sharding import plan_from_config

    cfg = sokoban.get_config("tiny")
    cfg.env.groups, cfg.env.group_size = 4, 8  # 32 rollout rows
    cfg.val.groups, cfg.val.group_size, cfg.val.batch_size = 64, 1, 64  # validation plays 64 at a time
    model = tiny_config()
    with_val = plan_from_config(cfg, model, (1, 1, 1))
    cfg.val.every, cfg.val.at_start = 0, False
    without_val = plan_from_config(cfg, model, (1, 1, 1))
    assert with_val.kv_cache == 2 * without_val.kv_cache
    cfg.env.groups, cfg.env.group_size = 1, 4  # 4 rollout rows
    cfg.val.batch_size = 6  # 6 validation rows do not split over 4 data devices: the trainer pads them to 8
    no_val = plan_from_config(cfg, model, (4, 1, 1))
    cfg.val.every = 20
    assert plan_from_config(cfg, model, (4, 1, 1)).kv_cache == 2 * no_val.kv_cache
