"""Policy losses (per token), registered in POLICY_LOSSES.

Signature: ``fn(logprobs, old_logprobs, advantages, response_mask, **hparams) ->
(loss [B, T], metrics)``; aggregate the loss with ``aggregation.agg_loss``. Metrics are
masked means over this batch's tokens (pg_clipfrac, ppo_kl, pg_clipfrac_lower, ...).
"""

from __future__ import annotations

import chex
import jax
import jax.numpy as jnp

from ragen_jax.algos.masked import masked_mean
from ragen_jax.algos.registry import POLICY_LOSSES

LOG_RATIO_CLAMP = 20.0  # veRL clamps log(pi/pi_old) to +-20 before exp for stability


def _check(logprobs, old_logprobs, advantages, response_mask) -> None:
    chex.assert_rank([logprobs, old_logprobs, advantages, response_mask], 2)
    chex.assert_equal_shape([logprobs, old_logprobs, advantages, response_mask])


def truncated_is_weights(old_logprobs: jax.Array, sampler_logprobs: jax.Array, cap: float) -> jax.Array:
    """min(pi_old / pi_sampler, cap) per token, without gradient (sampler/trainer mismatch fix).

    old_logprobs and sampler_logprobs [B, T] -> weights [B, T].
    """
    chex.assert_equal_shape([old_logprobs, sampler_logprobs])
    log_w = jnp.clip(old_logprobs - sampler_logprobs, -LOG_RATIO_CLAMP, LOG_RATIO_CLAMP)
    return jax.lax.stop_gradient(jnp.minimum(jnp.exp(log_w), cap))


@POLICY_LOSSES.register("vanilla")
def ppo_clip_loss(logprobs: jax.Array, old_logprobs: jax.Array, advantages: jax.Array,
                  response_mask: jax.Array, *, clip_ratio_low: float = 0.2,
                  clip_ratio_high: float | None = None, clip_ratio_c: float | None = 3.0,
                  sampler_logprobs: jax.Array | None = None,
                  tis_cap: float | None = None) -> tuple[jax.Array, dict[str, jax.Array]]:
    """PPO clipped surrogate with clip-higher and dual-clip, per token.

    loss = max(-A r, -A clip(r, 1 - low, 1 + high)), r = pi / pi_old; for A < 0 it is further
    capped at -A c (dual clip; ``clip_ratio_c=None`` turns it off, else c > 1). With
    ``sampler_logprobs`` and ``tis_cap`` the loss is scaled by truncated importance weights.
    """
    _check(logprobs, old_logprobs, advantages, response_mask)
    high = clip_ratio_low if clip_ratio_high is None else clip_ratio_high
    if clip_ratio_c is not None and clip_ratio_c <= 1.0:
        raise ValueError(f"Dual-clip constant clip_ratio_c must be > 1 (got {clip_ratio_c}); use None to disable.")
    if tis_cap is not None and tis_cap <= 0:
        raise ValueError(f"Truncated-IS cap tis_cap must be > 0 (got {tis_cap}); use None to disable.")
    advantages = jax.lax.stop_gradient(advantages)
    log_ratio = jnp.clip(logprobs - old_logprobs, -LOG_RATIO_CLAMP, LOG_RATIO_CLAMP)
    ratio = jnp.exp(log_ratio)
    loss_unclipped = -advantages * ratio
    loss_clipped = -advantages * jnp.clip(ratio, 1.0 - clip_ratio_low, 1.0 + high)
    loss = jnp.maximum(loss_unclipped, loss_clipped)
    metrics = {
        "pg_clipfrac": masked_mean((loss_clipped > loss_unclipped).astype(jnp.float32), response_mask),
        "ppo_kl": masked_mean(-log_ratio, response_mask),
    }
    if clip_ratio_c is not None:
        loss_dual = -advantages * clip_ratio_c
        dual_hit = (advantages < 0) & (loss > loss_dual)
        metrics["pg_clipfrac_lower"] = masked_mean(dual_hit.astype(jnp.float32), response_mask)
        loss = jnp.where(advantages < 0, jnp.minimum(loss, loss_dual), loss)
    else:
        metrics["pg_clipfrac_lower"] = jnp.zeros((), jnp.float32)
    if sampler_logprobs is not None and tis_cap is not None:
        weights = truncated_is_weights(old_logprobs, sampler_logprobs, tis_cap)
        loss = loss * weights
        metrics["tis_weight_mean"] = masked_mean(weights, response_mask)
        metrics["tis_clipfrac"] = masked_mean((weights >= tis_cap).astype(jnp.float32), response_mask)
    return jnp.where(response_mask.astype(bool), loss, 0.0), metrics


@POLICY_LOSSES.register("reinforce")
def reinforce_loss(logprobs: jax.Array, old_logprobs: jax.Array, advantages: jax.Array,
                   response_mask: jax.Array) -> tuple[jax.Array, dict[str, jax.Array]]:
    """Plain policy gradient -A log pi per token (veRL's "gpg"); old_logprobs only for ppo_kl."""
    _check(logprobs, old_logprobs, advantages, response_mask)
    loss = -jax.lax.stop_gradient(advantages) * logprobs
    metrics = {"ppo_kl": masked_mean(old_logprobs - logprobs, response_mask)}
    return jnp.where(response_mask.astype(bool), loss, 0.0), metrics


POLICY_LOSSES.register("ppo", ppo_clip_loss)


def entropy_bonus_loss(entropy: jax.Array, response_mask: jax.Array, coef: float) -> jax.Array:
    """Per-token loss -coef * entropy (aggregate it like the policy loss). [B, T] -> [B, T]."""
    chex.assert_equal_shape([entropy, response_mask])
    return jnp.where(response_mask.astype(bool), -coef * entropy, 0.0)
