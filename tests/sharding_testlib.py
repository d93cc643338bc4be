"""Shared pieces of the sharding tests: a tiny actor, a synthetic PPO batch, one train step and one greedy
generation, each run on a given mesh (or on one device with mesh=None) and returned as host numpy."""

from __future__ import annotations

import contextlib

import numpy as np

import jax
import jax.numpy as jnp
import optax
from flax import nnx

from ragen_jax.models.tiny import tiny_config
from ragen_jax.models import CausalLM, apply_lora
from ragen_jax.sampling import SamplingConfig, Sampler
from ragen_jax.sharding import (cache_spec, fit_spec, make_mesh, place_for_training, reshard_for_sampling, shard_batch,
                                shard_state)
from ragen_jax.trainer.setup import split_model
from ragen_jax.algos.settings import AlgoSettings
from ragen_jax.trainer.steps import make_step_fns

VOCAB = 1152  # divisible by 8, so the embedding and head really split over every mesh axis
ROWS, T, MICRO = 16, 24, 8
MESHES = [(8, 1, 1), (1, 8, 1), (1, 4, 2), (2, 2, 2)]


def algo() -> AlgoSettings:
    return AlgoSettings(
        adv_estimator="grpo", policy_loss="vanilla", value_loss="clipped", loss_agg_mode="token-mean",
        gamma=1.0, lam=1.0, high_level_gamma=0.95, norm_adv_by_std_in_grpo=True, clip_ratio_low=0.2,
        clip_ratio_high=0.28, clip_ratio_c=3.0, cliprange_value=0.5, entropy_coeff=0.001, use_kl_loss=False,
        kl_loss_coef=0.0, kl_loss_type="kl", tis_cap=None, temperature=1.0, logprob_chunk=16)


def make_actor(lora: bool = False, seed: int = 0):
    """A SplitModel of a tiny CausalLM (vocab divisible by 8, untied head, Qwen3 q/k norms with bias)."""
    config = tiny_config(vocab_size=VOCAB, tie_word_embeddings=False, qk_norm=True)
    model = CausalLM(config, rngs=nnx.Rngs(seed))
    if lora:
        apply_lora(model, 4, 8.0, rngs=nnx.Rngs(seed + 1))
    return split_model(model, lora)


def synthetic_batch(seed: int = 0) -> dict[str, np.ndarray]:
    """A right-padded PPO mini-batch [ROWS, T] with random tokens, advantages and old log-probs."""
    rng = np.random.default_rng(seed)
    lengths = rng.integers(T // 2, T + 1, size=ROWS)
    mask = (np.arange(T)[None, :] < lengths[:, None]).astype(np.int32)
    loss_mask = mask.copy()
    loss_mask[:, : T // 4] = 0
    logp = -rng.uniform(5.0, 8.0, size=(ROWS, T)).astype(np.float32) * loss_mask
    return dict(tokens=(rng.integers(0, VOCAB, size=(ROWS, T)) * mask).astype(np.int32), attention_mask=mask,
                loss_mask=loss_mask.astype(np.float32), old_logprobs=logp, sample_logprobs=logp,
                advantages=(rng.normal(size=(ROWS, 1)) * loss_mask).astype(np.float32))


def to_host(tree) -> dict[str, np.ndarray]:
    """Flat {path: numpy} of a (possibly multi-host) pytree."""
    from jax.experimental import multihost_utils
    from ragen_jax.sharding.rules import path_str

    def fetch(x):
        if isinstance(x, jax.Array) and not x.is_fully_addressable:
            return np.asarray(multihost_utils.process_allgather(x, tiled=True))
        return np.asarray(x)
    return {path_str(p): fetch(x) for p, x in jax.tree_util.tree_leaves_with_path(tree)}


def active_mesh(mesh):
    """jax.set_mesh(mesh), or no context for mesh None (one device)."""
    return contextlib.nullcontext() if mesh is None else jax.set_mesh(mesh)


def placed(model, tx, batch: dict, mesh_shape=None, devices=None):
    """`model` (split), its optimizer state and `batch` as the trainer places them on a `mesh_shape` mesh, or on
    one device when None -> (model, opt_state, batch of arrays, mesh or None)."""
    if mesh_shape is None:
        return model, tx.init(model.trainable), {k: jnp.asarray(v) for k, v in batch.items()}, None
    mesh = make_mesh(mesh_shape, devices)
    model = place_for_training(model, mesh)
    return model, shard_state(tx.init(model.trainable), mesh), shard_batch(batch, mesh), mesh


def train_step(mesh_shape=None, lora: bool = False, devices=None) -> dict[str, np.ndarray]:
    """One actor update (SGD, 2 micro-batches) on the mesh -> updated trainable params and metrics."""
    actor = make_actor(lora)
    tx = optax.sgd(0.5)
    batch = synthetic_batch()
    actor, opt, batch, mesh = placed(actor, tx, batch, mesh_shape, devices)
    fns = make_step_fns(actor.graphdef, None, algo(), tx, None, MICRO)
    with active_mesh(mesh):  # as the trainer runs: the model's activation hints apply
        trainable, _, metrics = fns["actor_update"](actor.trainable, opt, actor.frozen, batch)
    out = {f"param/{k}": v for k, v in to_host(trainable).items()}
    out.update({f"metric/{k}": v for k, v in to_host(metrics).items()})
    return out


def critic_step(mesh_shape=None) -> dict[str, np.ndarray]:
    """One PPO critic update (value head on the actor's backbone, SGD, 2 micro-batches) with its scored values
    -> updated critic params, values and metrics."""
    from ragen_jax.models import ValueModel

    actor = make_actor()
    critic = split_model(ValueModel.from_causal_lm(nnx.merge(actor.graphdef, actor.trainable, actor.frozen),
                                                   rngs=nnx.Rngs(2)), False)
    tx = optax.sgd(0.5)
    batch = synthetic_batch()
    batch["returns"] = np.cumsum(batch["advantages"] * batch["loss_mask"], axis=1).astype(np.float32)
    critic, opt, batch, mesh = placed(critic, tx, batch, mesh_shape)
    fns = make_step_fns(actor.graphdef, critic.graphdef, algo(), None, tx, MICRO)
    with active_mesh(mesh):
        values = fns["score_values"](critic.trainable, critic.frozen, batch["tokens"], batch["attention_mask"])
        mb = dict(tokens=batch["tokens"], attention_mask=batch["attention_mask"], loss_mask=batch["loss_mask"],
                  values=values + 0.1, returns=batch["returns"])
        trainable, _, metrics = fns["critic_update"](critic.trainable, opt, critic.frozen, mb)
    out = {f"param/{k}": v for k, v in to_host(trainable).items()}
    out.update({f"metric/{k}": v for k, v in to_host(metrics).items()}, values=to_host({"v": values})["v"])
    return out


def generate(mesh_shape=None, layout: str = "no_fsdp") -> dict[str, np.ndarray]:
    """Greedy generation of 8 new tokens for 8 prompts of different lengths."""
    actor = make_actor()
    params = actor.full()
    mesh = None
    if mesh_shape is not None:  # as the trainer samples: a mesh-aware sampler (sharded cache, global row inputs)
        mesh = make_mesh(mesh_shape)
        params = reshard_for_sampling(shard_state(params, mesh), mesh, layout=layout)
    # on a mesh, decode on weights laid out [out, in] (sharded as the jit places them): single-device plain is the
    # reference both layouts must match
    sampler = Sampler(actor.graphdef, cache_size=32, pad_id=0, batch_size=8, mesh=mesh,
                      out_first_weights=mesh is not None)
    cache, cache_lens = sampler.init_cache()
    if mesh is not None:
        for layer in cache.k + cache.v:
            assert layer.sharding.spec == fit_spec(cache_spec(), layer.shape, mesh)
    rng = np.random.default_rng(1)
    lens = rng.integers(3, 9, size=8).astype(np.int32)
    prompts = rng.integers(1, VOCAB, size=(8, 8)).astype(np.int32)
    with active_mesh(mesh):
        out = sampler.generate(params, prompts, lens, jax.random.PRNGKey(0),
                               SamplingConfig(max_new_tokens=8, greedy=True), cache=cache, cache_lens=cache_lens)
    return dict(tokens=np.asarray(out.tokens), logprobs=np.asarray(out.logprobs), lengths=np.asarray(out.lengths))


def assert_close(got: dict, want: dict, rtol: float = 2e-4, atol: float = 2e-5) -> None:
    assert got.keys() == want.keys()
    for k in want:
        np.testing.assert_allclose(got[k], want[k], rtol=rtol, atol=atol, err_msg=k)
