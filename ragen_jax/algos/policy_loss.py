"""Policy losses (per token), registered in POLICY_LOSSES.

Signature: ``fn(logprobs, old_logprobs, advantages, response_mask, **hparams) ->
(loss [B, T], metrics)``; aggregate the loss with ``aggregation.agg_loss``. Metrics are
masked means over this batch's tokens (pg_clipfrac, ppo_kl, pg_clipfrac_lower, ...).
Built-ins: PPO clip (``vanilla``/``ppo``), ``reinforce`` (= veRL's ``gpg``), GSPO (``gspo``, ``gspo_token``) and
CISPO (``cispo``). Sequence-level losses (GSPO) read only their own row, so they stay exact when
the trainer splits a mini-batch into micro-batches of whole rows.
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


def _clipped_surrogate(ratio: jax.Array, advantages: jax.Array, low: float,
                       high: float) -> tuple[jax.Array, jax.Array]:
    """max(-A r, -A clip(r, 1 - low, 1 + high)) and where the clipped term won (no gradient there)."""
    loss_unclipped = -advantages * ratio
    loss_clipped = -advantages * jnp.clip(ratio, 1.0 - low, 1.0 + high)
    return jnp.maximum(loss_unclipped, loss_clipped), loss_clipped > loss_unclipped


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
    loss, clipped = _clipped_surrogate(jnp.exp(log_ratio), advantages, clip_ratio_low, high)
    metrics = {
        "pg_clipfrac": masked_mean(clipped.astype(jnp.float32), response_mask),
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
POLICY_LOSSES.register("gpg", reinforce_loss)  # veRL's name (actor.policy_loss.loss_mode=gpg)

# GSPO's clip ranges (Zheng et al. 2025, "Group Sequence Policy Optimization", arXiv:2507.18071, sec. 5.1).
GSPO_CLIP_LOW, GSPO_CLIP_HIGH = 3e-4, 4e-4


def sequence_log_ratio(logprobs: jax.Array, old_logprobs: jax.Array, response_mask: jax.Array) -> jax.Array:
    """log s_i: the mean over row i's response tokens of log pi - log pi_old (GSPO's length-normalised
    sequence ratio, in log space). [B, T] -> [B]; 0 for a row without response tokens."""
    chex.assert_equal_shape([logprobs, old_logprobs, response_mask])
    mean = masked_mean(logprobs - old_logprobs, response_mask, axis=-1)
    return jnp.clip(mean, -LOG_RATIO_CLAMP, LOG_RATIO_CLAMP)


def _per_token(row_values: jax.Array, response_mask: jax.Array) -> jax.Array:
    """[B] -> [B, T]: each row's value on each of its tokens."""
    return jnp.broadcast_to(row_values[:, None], response_mask.shape)


def _sequence_metrics(logprobs, old_logprobs, clipped, response_mask) -> dict[str, jax.Array]:
    return {"pg_clipfrac": masked_mean(clipped.astype(jnp.float32), response_mask),
            "ppo_kl": masked_mean(old_logprobs - logprobs, response_mask)}


@POLICY_LOSSES.register("gspo")
def gspo_loss(logprobs: jax.Array, old_logprobs: jax.Array, advantages: jax.Array, response_mask: jax.Array,
              *, clip_ratio_low: float = GSPO_CLIP_LOW,
              clip_ratio_high: float | None = GSPO_CLIP_HIGH) -> tuple[jax.Array, dict[str, jax.Array]]:
    """GSPO: sequence ratio s_i = exp(mean_t log(pi / pi_old)), clipped per sequence, on each of its tokens.

    loss_i = max(-A_i s_i, -A_i clip(s_i, 1 - low, 1 + high)), A_i = the mean advantage over row i's
    response tokens (GRPO's advantages are constant per row); every response token of row i carries
    loss_i, so the aggregation mode decides how sequences are weighed (seq-mean-token-mean: 1/G sum_i).
    """
    _check(logprobs, old_logprobs, advantages, response_mask)
    high = clip_ratio_low if clip_ratio_high is None else clip_ratio_high
    seq_adv = jax.lax.stop_gradient(masked_mean(advantages, response_mask, axis=-1))
    ratio = jnp.exp(sequence_log_ratio(logprobs, old_logprobs, response_mask))
    seq_loss, clipped = _clipped_surrogate(ratio, seq_adv, clip_ratio_low, high)
    loss = _per_token(seq_loss, response_mask)
    metrics = _sequence_metrics(logprobs, old_logprobs, _per_token(clipped, response_mask), response_mask)
    return jnp.where(response_mask.astype(bool), loss, 0.0), metrics


@POLICY_LOSSES.register("gspo_token")
def gspo_token_loss(logprobs: jax.Array, old_logprobs: jax.Array, advantages: jax.Array,
                    response_mask: jax.Array, *, clip_ratio_low: float = GSPO_CLIP_LOW,
                    clip_ratio_high: float | None = GSPO_CLIP_HIGH) -> tuple[jax.Array, dict[str, jax.Array]]:
    """GSPO-token: s_it = sg[s_i] pi_t / sg[pi_t] (value s_i, gradient of token t alone), per-token A_t.

    loss_t = max(-A_t s_it, -A_t clip(s_it, 1 - low, 1 + high)). With advantages constant per row its
    value and gradient equal ``gspo``'s; per-token advantages (GAE, turn-level) are used as they are.
    """
    _check(logprobs, old_logprobs, advantages, response_mask)
    high = clip_ratio_low if clip_ratio_high is None else clip_ratio_high
    seq_log_ratio = jax.lax.stop_gradient(sequence_log_ratio(logprobs, old_logprobs, response_mask))
    log_ratio = seq_log_ratio[:, None] + logprobs - jax.lax.stop_gradient(logprobs)
    loss, clipped = _clipped_surrogate(jnp.exp(log_ratio), jax.lax.stop_gradient(advantages),
                                       clip_ratio_low, high)
    metrics = _sequence_metrics(logprobs, old_logprobs, clipped, response_mask)
    return jnp.where(response_mask.astype(bool), loss, 0.0), metrics


# CISPO's bounds (MiniMax-M1, arXiv:2506.13585, sec. 3.1): no lower bound on the IS weight (the paper sets
# eps_low "to a large value"; 1.0 makes the bound 0, below every ratio); the paper tunes eps_high without
# publishing it: 5.0 (a weight cap of 6) is SkyRL's CISPO default.
CISPO_CLIP_LOW, CISPO_CLIP_HIGH = 1.0, 5.0


@POLICY_LOSSES.register("cispo")
def cispo_loss(logprobs: jax.Array, old_logprobs: jax.Array, advantages: jax.Array, response_mask: jax.Array,
               *, clip_ratio_low: float = CISPO_CLIP_LOW,
               clip_ratio_high: float | None = CISPO_CLIP_HIGH) -> tuple[jax.Array, dict[str, jax.Array]]:
    """CISPO: -sg[clip(r_t, 1 - low, 1 + high)] A_t log pi_t, r_t = pi / pi_old per token.

    The clipped IS weight carries no gradient, so every token keeps a gradient (through log pi only);
    pg_clipfrac is the fraction of tokens whose weight was clipped.
    """
    _check(logprobs, old_logprobs, advantages, response_mask)
    high = clip_ratio_low if clip_ratio_high is None else clip_ratio_high
    log_ratio = jnp.clip(logprobs - old_logprobs, -LOG_RATIO_CLAMP, LOG_RATIO_CLAMP)
    ratio = jax.lax.stop_gradient(jnp.exp(log_ratio))
    weight = jnp.clip(ratio, 1.0 - clip_ratio_low, 1.0 + high)
    loss = -weight * jax.lax.stop_gradient(advantages) * logprobs
    metrics = {"pg_clipfrac": masked_mean((weight != ratio).astype(jnp.float32), response_mask),
               "ppo_kl": masked_mean(-log_ratio, response_mask),
               "cispo_weight_mean": masked_mean(weight, response_mask)}
    return jnp.where(response_mask.astype(bool), loss, 0.0), metrics


def entropy_bonus_loss(entropy: jax.Array, response_mask: jax.Array, coef: float) -> jax.Array:
    """Per-token loss -coef * entropy (aggregate it like the policy loss). [B, T] -> [B, T]."""
    chex.assert_equal_shape([entropy, response_mask])
    return jnp.where(response_mask.astype(bool), -coef * entropy, 0.0)
