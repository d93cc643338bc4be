"""Policy losses (per token), registered in POLICY_LOSSES.

Signature: ``fn(logprobs, old_logprobs, advantages, response_mask, **hparams) ->
(loss [B, T], metrics)``; aggregate the loss with ``aggregation.agg_loss``. Metrics are
masked means over this batch's tokens (pg_clipfrac, ppo_kl, pg_clipfrac_lower, ...).
Built-ins: PPO clip (``vanilla``/``ppo``), ``reinforce`` (= veRL's ``gpg``), GSPO (``gspo``, ``gspo_token``),
CISPO (``cispo``) and veRL's ``clip_cov``, ``kl_cov``, ``geo_mean`` (GMPO) and ``sapo``. Sequence-level losses
(GSPO, GMPO) read only their own row, so they stay exact when the trainer splits a mini-batch into micro-batches of
whole rows; clip_cov and kl_cov rank the tokens of the micro-batch they see (as veRL does).
"""

from __future__ import annotations

import inspect

import chex
import jax
import jax.numpy as jnp

from ragen_jax.algos.aggregation import agg_denominator
from ragen_jax.algos.masked import masked_mean, masked_sum
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


# --- veRL's further losses (actor.policy_loss.loss_mode): clip_cov, kl_cov, geo_mean (GMPO), sapo ----------------

# veRL's defaults (PolicyLossConfig / ActorConfig): the share of tokens clip_cov detaches and kl_cov penalises, the
# covariance band clip_cov picks from, kl_cov's penalty coefficient, and SAPO's gate temperatures.
COV_RATIO, CLIP_COV_LB, CLIP_COV_UB, PPO_KL_COEF = 0.0002, 1.0, 5.0, 0.1
SAPO_TAU_POS, SAPO_TAU_NEG = 1.0, 1.05
GMPO_CLIP = 0.4  # GMPO's log-space clip range (e^-0.4, e^0.4): the paper's and veRL's example's

# a loss whose mean over sequences counts every row of the batch, empty ones too (see policy_loss_denominator)
ALL_ROWS_ATTR = "mean_over_all_rows"
# the keyword under which a policy loss that names it receives the rollout correction's weights [B, T]
ROLLOUT_WEIGHTS_KEY = "rollout_weights"

# the aggregation mode a loss's objective is defined with; the config check refuses any other (veRL ignores
# loss_agg_mode for these losses and uses its own reduction without a word)
REQUIRED_AGG_MODE_ATTR = "required_loss_agg_mode"


def required_agg_mode_problem(policy_loss, loss_agg_mode: str, name: object = None) -> str | None:
    """Why a policy loss (selected as `name`) cannot run under `loss_agg_mode` (sapo and geo_mean are means over
    sequences), or None."""
    required = getattr(policy_loss, REQUIRED_AGG_MODE_ATTR, None)
    if required is None or loss_agg_mode == required:
        return None
    name = repr(name) if name is not None else getattr(policy_loss, "__name__", repr(policy_loss))
    return (f"policy loss {name} is a mean over sequences, so it needs loss_agg_mode={required!r} (veRL reduces it "
            f"that way whatever loss_agg_mode says), got {loss_agg_mode!r}; set algo.loss_agg_mode={required!r} "
            f"(the sapo and gmpo presets do)")


def _covariance(advantages: jax.Array, logprobs: jax.Array, response_mask: jax.Array) -> jax.Array:
    """Per-token (A - mean A)(log pi - mean log pi), means over the masked tokens; no gradient. [B, T] -> [B, T]."""
    logprobs = jax.lax.stop_gradient(logprobs)
    advantages = jax.lax.stop_gradient(advantages)
    return (advantages - masked_mean(advantages, response_mask)) * (logprobs - masked_mean(logprobs, response_mask))


def _top_share(score: jax.Array, eligible: jax.Array, response_mask: jax.Array, share: float) -> jax.Array:
    """The max(floor(share * masked tokens), 1) eligible tokens of highest score (fewer if fewer are eligible).

    score, eligible, response_mask [B, T] -> bool [B, T]. Deterministic and jit-safe: the count is traced, the
    selection is a rank (stable argsort, ties by position) below it."""
    flat = jnp.where(eligible, score, -jnp.inf).ravel()
    order = jnp.argsort(-flat, stable=True)
    rank = jnp.zeros(flat.shape, jnp.int32).at[order].set(jnp.arange(flat.size, dtype=jnp.int32))
    count = jnp.maximum(jnp.floor(share * jnp.sum(response_mask.astype(jnp.float32))), 1.0)
    return eligible & (rank.reshape(score.shape) < count)


def _check_share(name: str, value: float) -> None:
    if not 0.0 < value <= 1.0:
        raise ValueError(f"{name} must be in (0, 1], the share of response tokens (got {value}); veRL's default is "
                         f"{COV_RATIO}.")


@POLICY_LOSSES.register("clip_cov")
def clip_cov_loss(logprobs: jax.Array, old_logprobs: jax.Array, advantages: jax.Array, response_mask: jax.Array,
                  *, clip_ratio_low: float = 0.2, clip_ratio_high: float | None = None,
                  clip_cov_ratio: float = COV_RATIO, clip_cov_lb: float = CLIP_COV_LB,
                  clip_cov_ub: float = CLIP_COV_UB) -> tuple[jax.Array, dict[str, jax.Array]]:
    """Clip-Cov (Cui et al. 2025, "The Entropy Mechanism of RL for Reasoning LMs", arXiv:2505.22617), as veRL.

    PPO's clipped surrogate max(-A r, -A clip(r, 1 - low, 1 + high)) (no dual clip, no clamp of log r), where
    max(floor(clip_cov_ratio * masked tokens), 1) tokens with clip_cov_lb < cov < clip_cov_ub that the PPO clip
    left alone lose their loss and gradient; cov = (A - mean A)(log pi - mean log pi) over this batch's tokens.
    veRL draws those tokens at random among the eligible ones; here they are the ones of highest cov (same count,
    deterministic). pg_clipfrac is the share of detached tokens. [B, T] inputs -> (loss [B, T], metrics).
    """
    _check(logprobs, old_logprobs, advantages, response_mask)
    _check_share("clip_cov_ratio", clip_cov_ratio)
    if not clip_cov_lb < clip_cov_ub:
        raise ValueError(f"clip_cov_lb ({clip_cov_lb}) must be below clip_cov_ub ({clip_cov_ub}): they bound the "
                         "covariance band clip_cov picks tokens from (veRL: 1.0 and 5.0).")
    high = clip_ratio_low if clip_ratio_high is None else clip_ratio_high
    advantages = jax.lax.stop_gradient(advantages)
    on = response_mask.astype(bool)
    log_ratio = logprobs - old_logprobs
    loss, clipped = _clipped_surrogate(jnp.exp(log_ratio), advantages, clip_ratio_low, high)
    cov = _covariance(advantages, logprobs, response_mask)
    eligible = on & ~clipped & (cov > clip_cov_lb) & (cov < clip_cov_ub)
    detached = _top_share(cov, eligible, response_mask, clip_cov_ratio)
    metrics = {"pg_clipfrac": masked_mean(detached.astype(jnp.float32), response_mask),
               "ppo_kl": masked_mean(-log_ratio, response_mask)}
    return jnp.where(on & ~detached, loss, 0.0), metrics


@POLICY_LOSSES.register("kl_cov")
def kl_cov_loss(logprobs: jax.Array, old_logprobs: jax.Array, advantages: jax.Array, response_mask: jax.Array,
                *, kl_cov_ratio: float = COV_RATIO,
                ppo_kl_coef: float = PPO_KL_COEF) -> tuple[jax.Array, dict[str, jax.Array]]:
    """KL-Cov (Cui et al. 2025, arXiv:2505.22617), as veRL: -A r on every token (no clip), plus
    ppo_kl_coef * |log r| on the max(floor(kl_cov_ratio * masked tokens), 1) tokens of highest
    cov = (A - mean A)(log pi - mean log pi) over this batch's tokens (ties by position; torch.topk's are
    unspecified). Its ppo_kl metric is veRL's: the mean |log r|. [B, T] inputs -> (loss [B, T], metrics).
    """
    _check(logprobs, old_logprobs, advantages, response_mask)
    _check_share("kl_cov_ratio", kl_cov_ratio)
    if ppo_kl_coef < 0:
        raise ValueError(f"ppo_kl_coef must be >= 0 (got {ppo_kl_coef}): it weighs kl_cov's |log r| penalty.")
    advantages = jax.lax.stop_gradient(advantages)
    on = response_mask.astype(bool)
    log_ratio = logprobs - old_logprobs
    abs_kl = jnp.abs(log_ratio)
    penalised = _top_share(_covariance(advantages, logprobs, response_mask), on, response_mask, kl_cov_ratio)
    loss = -advantages * jnp.exp(log_ratio) + jnp.where(penalised, ppo_kl_coef * abs_kl, 0.0)
    return jnp.where(on, loss, 0.0), {"ppo_kl": masked_mean(abs_kl, response_mask)}


def _row_mean(x: jax.Array, response_mask: jax.Array) -> jax.Array:
    """sum_t x mask / (sum_t mask + 1e-8), veRL's per-row mean (0 on an empty row). [B, T] -> [B]."""
    mask = response_mask.astype(x.dtype)
    return masked_sum(x, response_mask, axis=-1) / (jnp.sum(mask, axis=-1) + 1e-8)


def geometric_row_weights(weights: jax.Array, response_mask: jax.Array) -> jax.Array:
    """Each row's geometric mean of its tokens' weights, exp(mean_t log(w + 1e-10)) as veRL (1 on an empty row),
    without gradient. [B, T] -> [B]."""
    chex.assert_equal_shape([weights, response_mask])
    return jax.lax.stop_gradient(jnp.exp(_row_mean(jnp.log(weights + 1e-10), response_mask)))


@POLICY_LOSSES.register("geo_mean")
def geo_mean_loss(logprobs: jax.Array, old_logprobs: jax.Array, advantages: jax.Array, response_mask: jax.Array,
                  *, clip_ratio_low: float = GMPO_CLIP,
                  clip_ratio_high: float | None = GMPO_CLIP,
                  rollout_weights: jax.Array | None = None) -> tuple[jax.Array, dict[str, jax.Array]]:
    """GMPO (Zhao et al. 2025, "Geometric-Mean Policy Optimization", arXiv:2507.20673), as veRL's geo_mean.

    Each token's log r is clipped in log space to [-low, high] on the side its advantage's sign makes pessimistic
    (sgn(A) min(sgn(A) log r, sgn(A) clip(log r))); the row's ratio is exp of their mean, its loss
    -A_i exp(mean), A_i the row's mean advantage, on each of its tokens. A rollout correction's rollout_weights
    [B, T] scale row i by their geometric mean over its tokens, exp(mean_t log(w_t + 1e-10)), as veRL. Under
    seq-mean-token-mean (required) the trainer divides by every row of the batch, empty ones included
    (`policy_loss_denominator`): veRL's torch.mean over rows. pg_clipfrac / pg_clipfrac_lower: tokens whose
    log r was clipped, with A > 0 / A < 0. [B, T] inputs -> (loss [B, T], metrics).
    """
    _check(logprobs, old_logprobs, advantages, response_mask)
    high = clip_ratio_low if clip_ratio_high is None else clip_ratio_high
    advantages = jax.lax.stop_gradient(advantages)
    log_ratio = logprobs - old_logprobs
    sign = jnp.sign(advantages)
    clamped = jnp.clip(log_ratio, -clip_ratio_low, high)
    pessimistic = sign * jnp.minimum(sign * log_ratio, sign * clamped)
    seq_loss = -_row_mean(advantages, response_mask) * jnp.exp(_row_mean(pessimistic, response_mask))
    if rollout_weights is not None:
        chex.assert_equal_shape([rollout_weights, response_mask])
        seq_loss = seq_loss * geometric_row_weights(rollout_weights, response_mask)
    clipped = (log_ratio != clamped).astype(jnp.float32)
    metrics = {"pg_clipfrac": masked_mean(clipped * (advantages > 0), response_mask),
               "ppo_kl": masked_mean(-log_ratio, response_mask),
               "pg_clipfrac_lower": masked_mean(clipped * (advantages < 0), response_mask)}
    return jnp.where(response_mask.astype(bool), _per_token(seq_loss, response_mask), 0.0), metrics


@POLICY_LOSSES.register("sapo")
def sapo_loss(logprobs: jax.Array, old_logprobs: jax.Array, advantages: jax.Array, response_mask: jax.Array,
              *, tau_pos: float = SAPO_TAU_POS,
              tau_neg: float = SAPO_TAU_NEG) -> tuple[jax.Array, dict[str, jax.Array]]:
    """SAPO (Gao et al. 2025, "Soft Adaptive Policy Optimization", arXiv:2511.20347), as veRL.

    -A f(r) per token with the soft gate f(r) = sigmoid(tau (r - 1)) 4 / tau in place of the clip (gradient
    A sech^2(tau (r - 1) / 2) at r, 1 at r = 1), tau = tau_pos where A > 0 else tau_neg; log r clamped to +-20.
    Its objective averages over sequences: it needs loss_agg_mode seq-mean-token-mean. Nothing is clipped:
    pg_clipfrac and pg_clipfrac_lower are 0, as veRL reports them. [B, T] inputs -> (loss [B, T], metrics).
    """
    _check(logprobs, old_logprobs, advantages, response_mask)
    if tau_pos <= 0 or tau_neg <= 0:
        raise ValueError(f"SAPO's temperatures tau_pos and tau_neg must be > 0 (got {tau_pos}, {tau_neg}); veRL's "
                         f"defaults are {SAPO_TAU_POS} and {SAPO_TAU_NEG}.")
    advantages = jax.lax.stop_gradient(advantages)
    log_ratio = jnp.clip(logprobs - old_logprobs, -LOG_RATIO_CLAMP, LOG_RATIO_CLAMP)
    tau = jnp.where(advantages > 0, tau_pos, tau_neg)
    gate = jax.nn.sigmoid(tau * (jnp.exp(log_ratio) - 1.0)) * (4.0 / tau)
    zero = jnp.zeros((), jnp.float32)
    metrics = {"pg_clipfrac": zero, "ppo_kl": masked_mean(-log_ratio, response_mask), "pg_clipfrac_lower": zero}
    return jnp.where(response_mask.astype(bool), -gate * advantages, 0.0), metrics


for _sequence_mean_loss in (geo_mean_loss, sapo_loss):
    setattr(_sequence_mean_loss, REQUIRED_AGG_MODE_ATTR, "seq-mean-token-mean")
setattr(geo_mean_loss, ALL_ROWS_ATTR, True)


def takes_rollout_weights(policy_loss) -> bool:
    """Whether a policy loss applies the rollout correction's weights itself (names ``rollout_weights``; a
    **kwargs alone does not count); the trainer multiplies the other losses' per-token loss by them."""
    return ROLLOUT_WEIGHTS_KEY in inspect.signature(policy_loss).parameters


def policy_loss_denominator(policy_loss, response_mask: jax.Array, loss_agg_mode: str,
                            row_valid: jax.Array | None = None, loss_scale_factor: int | None = None) -> jax.Array:
    """What the aggregated numerator of `policy_loss` over a batch is divided by. response_mask [B, T] -> scalar.

    A loss averaging over every row (geo_mean: veRL's torch.mean over rows) counts all rows, empty ones (no token
    to train, or every token dropped by a rollout correction) included, and padding rows (row_valid [B] 0) not;
    the others take the aggregation's own denominator (seq-mean-token-mean: the rows with tokens)."""
    chex.assert_rank(response_mask, 2)
    if not getattr(policy_loss, ALL_ROWS_ATTR, False):
        return agg_denominator(response_mask, loss_agg_mode, loss_scale_factor)
    if row_valid is None:
        return jnp.asarray(response_mask.shape[0], jnp.float32)
    chex.assert_shape(row_valid, response_mask.shape[:1])
    return jnp.sum(row_valid.astype(jnp.float32))
