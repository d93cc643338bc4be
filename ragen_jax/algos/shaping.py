"""RAGEN's options applied to advantages after the estimator (agent_trainer's order): soft reweighting by group
reward std, GRPO's length weighting, zeroing the task advantage. Pure functions on the [B, T] layout."""

from __future__ import annotations

import chex
import jax
import jax.numpy as jnp

from ragen_jax.algos.advantages import group_mean_std


def soft_advantage_weights(scores: jax.Array, group_ids: jax.Array, response_mask: jax.Array,
                           episode_ids: jax.Array | None = None, eps: float = 1e-6) -> jax.Array:
    """[B] weights std_g / (max over groups of std_g + eps) (RAGEN's `soft_advantage_reweight`): groups with little
    reward signal are down-weighted instead of dropped. std_g is GRPO's (unbiased, each episode once, a group of
    one has std 1); rows with nothing to train (padding) take no part in the max.
    scores, group_ids [B]; response_mask [B, T]."""
    chex.assert_rank([scores, group_ids, response_mask], [1, 1, 2])
    _, std, count = group_mean_std(scores, group_ids, episode_ids)
    std = jnp.where(count <= 1, 1.0, std)
    trained = response_mask.astype(bool).any(axis=-1)
    return std / (jnp.max(jnp.where(trained, std, 0.0)) + eps)


def length_weights(response_mask: jax.Array) -> jax.Array:
    """[B] 1 / (row length / mean row length) (RAGEN's `grpo_advantage_length_weight`): a long response's
    advantage per token shrinks, a short one's grows. The mean is over rows with something to train."""
    chex.assert_rank(response_mask, 2)
    lengths = response_mask.astype(jnp.float32).sum(axis=-1)
    trained = lengths > 0
    mean = jnp.sum(jnp.where(trained, lengths, 0.0)) / jnp.maximum(jnp.sum(trained), 1)
    return mean / (lengths + 1e-6)


def shape_advantages(advantages: jax.Array, response_mask: jax.Array, scores: jax.Array, group_ids: jax.Array,
                     episode_ids: jax.Array | None = None, *, soft_reweight: bool = False,
                     length_weight: bool = False, zero: bool = False) -> jax.Array:
    """advantages [B, T] after RAGEN's optional shaping, in its order: soft reweighting, length weighting (its
    caller applies it to GRPO only), then zeroing (`zero_task_advantage`: only the entropy / KL terms train)."""
    chex.assert_equal_shape([advantages, response_mask])
    if soft_reweight:
        advantages = advantages * soft_advantage_weights(scores, group_ids, response_mask, episode_ids)[:, None]
    if length_weight:
        advantages = advantages * length_weights(response_mask)[:, None]
    if zero:
        advantages = jnp.zeros_like(advantages)
    return advantages
