"""Rollout correction for the sampler/trainer mismatch, registered in ROLLOUT_CORRECTIONS.

The sampler's log-probs differ from the trainer's (precision, kernels, top-p/top-k), so the
trainer's old policy weighs a sampled token by rho_t = pi_old(t) / pi_sampler(t). A correction is
``fn(old_logprobs, sampler_logprobs, response_mask, *, bound) -> (weights [B, T], keep [B, T] bool,
metrics)``: the trainer multiplies the per-token policy loss by ``weights`` and drops the tokens
with ``keep`` False from the whole actor loss and its denominator. Neither depends on the trained
parameters, so the trainer computes them once per mini-batch, before the micro-batch split, and
any policy loss composes with any correction. ``bound=None`` takes the correction's default.
"""

from __future__ import annotations

from collections.abc import Callable

import chex
import jax
import jax.numpy as jnp

from ragen_jax.algos.advantages import accepts_keyword, call_with_supported
from ragen_jax.algos.masked import masked_mean
from ragen_jax.algos.policy_loss import LOG_RATIO_CLAMP, truncated_is_weights
from ragen_jax.algos.registry import ROLLOUT_CORRECTIONS

# tis: veRL's rollout_is_threshold default (2.0). icepop: [1/2, 2] keeps IcePop's lower end 0.5 (Ling team,
# "Small Leak Can Sink a Great Ship", 2025, uses [0.5, 5]) with veRL's reciprocal band. seq_geo_mask: the
# loose end of veRL's "typical 1.0002 - 1.001" for geometric rejection. decoupled: the behaviour weight cap AReaL's
# asynchronous runs use (actor.behav_imp_weight_cap: 5).
DEFAULT_BOUNDS = {"tis": 2.0, "icepop": 2.0, "seq_geo_mask": 1.001, "decoupled": 5.0}

Correction = Callable[[jax.Array, jax.Array, jax.Array], tuple[jax.Array, jax.Array, dict[str, jax.Array]]]


def log_mismatch(old_logprobs: jax.Array, sampler_logprobs: jax.Array) -> jax.Array:
    """log rho_t = log pi_old - log pi_sampler, without gradient. [B, T].

    Not clamped: a band test or a row mean must see the real ratio (clamping each token to +-20 first made a row
    with log rho [25, -30] average 0); clamp only where rho itself is formed (`_rho`)."""
    chex.assert_rank([old_logprobs, sampler_logprobs], 2)
    chex.assert_equal_shape([old_logprobs, sampler_logprobs])
    return jax.lax.stop_gradient(old_logprobs - sampler_logprobs)


def _rho(log_rho: jax.Array) -> jax.Array:
    """exp(log rho) with log rho clamped like the policy losses' log-ratios, so it stays finite."""
    return jnp.exp(jnp.clip(log_rho, -LOG_RATIO_CLAMP, LOG_RATIO_CLAMP))


def _band(name: str, bound: float | None) -> float:
    b = DEFAULT_BOUNDS[name] if bound is None else bound
    if not b > 1.0:
        raise ValueError(f"Rollout correction {name!r} keeps ratios in [1/b, b], so its bound b must be > 1 "
                         f"(got {b}); set config.algo.rollout_correction_bound "
                         f"(0 = the default {DEFAULT_BOUNDS[name]}).")
    return float(b)


def _metrics(log_rho, weights, keep, response_mask) -> dict[str, jax.Array]:
    """Mismatch and correction statistics over the response tokens (weights over the kept ones)."""
    return {"rollout_corr_mismatch_k1": masked_mean(-log_rho, response_mask),
            "rollout_corr_token_masked_frac": masked_mean((~keep).astype(jnp.float32), response_mask),
            "rollout_corr_weight_mean": masked_mean(weights, response_mask * keep)}


@ROLLOUT_CORRECTIONS.register("none")
def no_correction(old_logprobs: jax.Array, sampler_logprobs: jax.Array, response_mask: jax.Array,
                  *, bound: float | None = None) -> tuple[jax.Array, jax.Array, dict[str, jax.Array]]:
    """Train on every token with weight 1 (the default; ``tis_cap`` may still weight the PPO loss)."""
    chex.assert_equal_shape([old_logprobs, sampler_logprobs, response_mask])
    return jnp.ones(response_mask.shape, jnp.float32), jnp.ones(response_mask.shape, bool), {}


@ROLLOUT_CORRECTIONS.register("tis")
def truncated_is_correction(old_logprobs: jax.Array, sampler_logprobs: jax.Array, response_mask: jax.Array,
                            *, bound: float | None = None) -> tuple[jax.Array, jax.Array, dict[str, jax.Array]]:
    """Truncated IS: weight min(rho_t, b) on every token, any policy loss (``tis_cap`` does this inside PPO)."""
    chex.assert_equal_shape([old_logprobs, sampler_logprobs, response_mask])
    cap = DEFAULT_BOUNDS["tis"] if bound is None else bound
    if not cap > 0:
        raise ValueError(f"Rollout correction 'tis' caps the weights at b, which must be > 0 (got {cap}).")
    weights = truncated_is_weights(old_logprobs, sampler_logprobs, cap)
    keep = jnp.ones(response_mask.shape, bool)
    metrics = _metrics(log_mismatch(old_logprobs, sampler_logprobs), weights, keep, response_mask)
    metrics["rollout_corr_clipfrac"] = masked_mean((weights >= cap).astype(jnp.float32), response_mask)
    return weights, keep, metrics


@ROLLOUT_CORRECTIONS.register("icepop")
def icepop_correction(old_logprobs: jax.Array, sampler_logprobs: jax.Array, response_mask: jax.Array,
                      *, bound: float | None = None) -> tuple[jax.Array, jax.Array, dict[str, jax.Array]]:
    """IcePop: tokens with rho_t outside [1/b, b] leave the loss; the others keep the IS weight rho_t.

    (IcePop's M(rho) = rho inside the band, 0 outside: masked, not truncated, importance sampling.)
    """
    chex.assert_equal_shape([old_logprobs, sampler_logprobs, response_mask])
    log_rho = log_mismatch(old_logprobs, sampler_logprobs)
    keep = jnp.abs(log_rho) <= jnp.log(_band("icepop", bound))
    weights = jnp.where(keep, _rho(log_rho), 0.0)
    return weights, keep, _metrics(log_rho, weights, keep, response_mask)


@ROLLOUT_CORRECTIONS.register("seq_geo_mask")
def sequence_geometric_mask(old_logprobs: jax.Array, sampler_logprobs: jax.Array, response_mask: jax.Array,
                            *, bound: float | None = None) -> tuple[jax.Array, jax.Array, dict[str, jax.Array]]:
    """Drop every row whose geometric-mean rho over its response tokens lies outside [1/b, b]; weights 1.

    The geometric mean exp(mean_t log rho_t) does not grow with length, so one bound suits short
    and long rows. rollout_corr_seq_masked_frac counts rows with response tokens.
    """
    chex.assert_equal_shape([old_logprobs, sampler_logprobs, response_mask])
    log_rho = log_mismatch(old_logprobs, sampler_logprobs)
    keep_row = jnp.abs(masked_mean(log_rho, response_mask, axis=-1)) <= jnp.log(_band("seq_geo_mask", bound))
    keep = jnp.broadcast_to(keep_row[:, None], response_mask.shape)
    weights = jnp.ones(response_mask.shape, jnp.float32)
    metrics = _metrics(log_rho, weights, keep, response_mask)
    has_tokens = response_mask.astype(bool).any(axis=-1)
    metrics["rollout_corr_seq_masked_frac"] = masked_mean((~keep_row).astype(jnp.float32), has_tokens)
    return weights, keep, metrics


@ROLLOUT_CORRECTIONS.register("decoupled")
def decoupled_ppo_correction(old_logprobs: jax.Array, sampler_logprobs: jax.Array, response_mask: jax.Array,
                             *, bound: float | None = None) -> tuple[jax.Array, jax.Array, dict[str, jax.Array]]:
    """AReaL's decoupled PPO (Fu et al. 2025) for asynchronous training: the policy loss's ratio is against the
    proximal policy (the learner's at the update's start: old_logprobs), and each token is weighted by the behaviour
    importance weight pi_prox / pi_behav (the sampler's log-probs); tokens whose weight exceeds b leave the loss
    (AReaL's behav_imp_weight_cap)."""
    chex.assert_equal_shape([old_logprobs, sampler_logprobs, response_mask])
    log_rho = log_mismatch(old_logprobs, sampler_logprobs)
    keep = log_rho <= jnp.log(_band("decoupled", bound))
    weights = jnp.where(keep, _rho(log_rho), 0.0)
    return weights, keep, _metrics(log_rho, weights, keep, response_mask)


def resolve_rollout_correction(name: str | Callable, bound: float | None, *, policy_loss: Callable,
                               tis_cap: float | None) -> Correction:
    """The correction ``name`` as fn(old_logprobs, sampler_logprobs, response_mask), checked now.

    Fails at build time (not at the first update) on a bad bound, on ``tis_cap`` together with a
    correction (the tokens would be weighted twice), and on ``tis_cap`` with a policy loss that
    ignores it.
    """
    fn = ROLLOUT_CORRECTIONS.get(name)
    if tis_cap is not None:
        if fn is not no_correction:
            raise ValueError(f"config.algo.tis_cap={tis_cap} and config.algo.rollout_correction={name!r} both "
                             "correct the sampler mismatch; set tis_cap=0 and use rollout_correction='tis' with "
                             "rollout_correction_bound=<cap> (the same weights, for every policy loss).")
        if not accepts_keyword(policy_loss, "tis_cap"):
            raise ValueError(f"config.algo.tis_cap applies inside the PPO loss ('vanilla') only, and policy loss "
                             f"{getattr(policy_loss, '__name__', policy_loss)!r} ignores it; set tis_cap=0 and use "
                             "rollout_correction='tis' with rollout_correction_bound=<cap>.")

    def correct(old_logprobs, sampler_logprobs, response_mask):
        return call_with_supported(fn, old_logprobs, sampler_logprobs, response_mask, bound=bound)

    probe = jax.ShapeDtypeStruct((1, 1), jnp.float32)
    jax.eval_shape(correct, probe, probe, probe)  # runs the correction's own argument checks
    return correct
