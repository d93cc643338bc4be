"""A training batch's statistics as RAGEN and veRL log them (data metrics, the policy's entropy before the update,
the sampler's agreement with the trainer), and the gathers the update takes its mini-batches with."""

from __future__ import annotations

import functools
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from ragen_jax import sharding
from ragen_jax.algos import agg_loss
from ragen_jax.algos.masked import masked_mean, masked_var


@jax.jit
def token_stats(arrays: dict[str, jax.Array], mask: jax.Array) -> dict[str, jax.Array]:
    """veRL's `critic/{name}/mean|max|min` of token grids [B, T] over the tokens in mask [B, T] (at least one),
    reduced where the shards live (any number of hosts)."""
    on = mask > 0
    out = {}
    for k, v in arrays.items():
        out.update({f"critic/{k}/mean": masked_mean(v, mask), f"critic/{k}/max": jnp.where(on, v, -jnp.inf).max(),
                    f"critic/{k}/min": jnp.where(on, v, jnp.inf).min()})
    return out


@functools.partial(jax.jit, static_argnames=("mode", "loss_scale_factor"))
def batch_entropy(entropy: jax.Array, mask: jax.Array, mode: str, loss_scale_factor: int | None = None):
    """RAGEN's `actor/entropy`: the policy's token entropy [B, T] before the update, from the old log-probs'
    scoring, aggregated over the whole batch's mask [B, T] as the loss is (loss_agg_mode)."""
    return {"actor/entropy": agg_loss(entropy, mask, mode, loss_scale_factor=loss_scale_factor)}


@jax.jit
def explained_variance(returns: jax.Array, values: jax.Array, mask: jax.Array) -> dict[str, jax.Array]:
    """veRL's `critic/vf_explained_var`: 1 - Var(returns - values) / (Var(returns) + 1e-5) over mask [B, T]
    (unbiased variances, as torch.var)."""
    return {"critic/vf_explained_var": 1.0 - masked_var(returns - values, mask) / (masked_var(returns, mask) + 1e-5)}


@jax.jit
def in_row_context(old_logprobs: jax.Array, sample_logprobs: jax.Array, same_context: jax.Array,
                   mask: jax.Array) -> tuple[jax.Array, dict[str, jax.Array]]:
    """Sampler log-probs [B, T] where the row holds the context a token was sampled in, the trainer's elsewhere.

    A "full" row whose history truncation dropped old turns trains its earlier turns in a shorter context than
    they were sampled in (as RAGEN); their sampler log-probs measure that context change, not a sampler
    mismatch, so the rollout correction and sampler_agreement must not read them. -> (log-probs [B, T],
    {share of trained tokens so re-contexted})."""
    changed = masked_mean((~same_context.astype(bool)).astype(jnp.float32), mask)
    return jnp.where(same_context, sample_logprobs, old_logprobs), {"rollout/context_changed_token_ratio": changed}


@jax.jit
def sampler_agreement(old_logprobs: jax.Array, sample_logprobs: jax.Array, mask: jax.Array) -> dict[str, jax.Array]:
    """How far the trainer's log-probs of the sampled tokens are from the sampler's, over mask [B, T]:
    mean and max |difference| and the importance weight exp(trainer - sampler) (mean, min, max)."""
    on = mask > 0
    diff = jnp.where(on, jnp.abs(old_logprobs - sample_logprobs), 0.0)
    weight = jnp.exp(jnp.clip(old_logprobs - sample_logprobs, -20.0, 20.0))
    return {"rollout/logprob_abs_diff_mean": masked_mean(diff, mask), "rollout/logprob_abs_diff_max": diff.max(),
            "rollout/is_weight_mean": masked_mean(weight, mask),
            "rollout/is_weight_min": jnp.where(on, weight, jnp.inf).min(),
            "rollout/is_weight_max": jnp.where(on, weight, -jnp.inf).max()}


@jax.jit
def take_rows(arrays: dict[str, jax.Array], rows: jax.Array) -> dict[str, jax.Array]:
    """One mini-batch: rows [m] of every [B, ...] array in one program, the result split over the batch axes."""
    return {k: sharding.constrain_rows(jnp.take(v, rows, axis=0)) for k, v in arrays.items()}


def row_total_stats(name: str, token_values: np.ndarray, valid: np.ndarray) -> dict[str, float]:
    """veRL's `critic/{name}/mean|max|min`: each trained row's total over its tokens [B, T], over the rows
    `valid` [B] (at least one)."""
    totals = np.asarray(token_values, np.float64).sum(axis=-1)[np.asarray(valid, bool)]
    return {f"critic/{name}/mean": float(totals.mean()), f"critic/{name}/max": float(totals.max()),
            f"critic/{name}/min": float(totals.min())}


def param_count(state: Any) -> int:
    return int(sum(x.size for x in jax.tree.leaves(state)))
