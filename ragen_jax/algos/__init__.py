"""Functional RL algorithms: advantage estimators, policy/value/KL/entropy losses, loss
aggregation, rollout corrections (sampler/trainer mismatch), chunked log-probs and presets.
Everything is selected by name from registries; register your own with
``@ADVANTAGE_ESTIMATORS.register("name")`` (and likewise), or point a config at
``"package.module:function"``. See docs/custom_losses.md.
"""

from ragen_jax.algos.advantages import (
    AdvantageInputs,
    accepts_keyword,
    bilevel_gae,
    call_with_supported,
    compute_advantages,
    gae,
    group_mean_std,
    grpo,
    reinforce_plus_plus,
    reinforce_plus_plus_baseline,
    rloo,
    turn_ends_from_mask,
    turn_ends_from_rewards,
)
from ragen_jax.algos.aggregation import AggMode, agg_denominator, agg_loss, agg_numerator, agg_parts
from ragen_jax.algos.kl import (
    KLController,
    apply_kl_penalty,
    init_kl_controller,
    kl_abs,
    kl_k1,
    kl_k2,
    kl_k3,
    kl_penalty,
    update_kl_controller,
)
from ragen_jax.algos.logprobs import logprobs_from_logits, token_logprobs_and_entropy
from ragen_jax.algos.masked import masked_mean, masked_sum, masked_var, masked_whiten
from ragen_jax.algos.policy_loss import (
    cispo_loss,
    clip_cov_loss,
    entropy_bonus_loss,
    geo_mean_loss,
    gspo_loss,
    gspo_token_loss,
    kl_cov_loss,
    ppo_clip_loss,
    reinforce_loss,
    sapo_loss,
    sequence_log_ratio,
    truncated_is_weights,
)
from ragen_jax.algos.presets import get_preset, preset_names, resolve_adv_estimator
from ragen_jax.algos.registry import (
    ADVANTAGE_ESTIMATORS,
    AGG_MODES,
    KL_ESTIMATORS,
    POLICY_LOSSES,
    ROLLOUT_CORRECTIONS,
    VALUE_LOSSES,
    Registry,
)
from ragen_jax.algos.rollout_correction import (
    icepop_correction,
    log_mismatch,
    no_correction,
    resolve_rollout_correction,
    sequence_geometric_mask,
    truncated_is_correction,
)
from ragen_jax.algos.value_loss import clipped_value_loss, mse_value_loss

__all__ = [
    "ADVANTAGE_ESTIMATORS", "AGG_MODES", "KL_ESTIMATORS", "POLICY_LOSSES", "ROLLOUT_CORRECTIONS", "VALUE_LOSSES",
    "AdvantageInputs", "AggMode", "KLController", "Registry",
    "accepts_keyword", "agg_denominator", "agg_loss", "agg_numerator", "agg_parts", "apply_kl_penalty",
    "bilevel_gae", "call_with_supported", "cispo_loss", "clip_cov_loss", "clipped_value_loss", "compute_advantages",
    "entropy_bonus_loss", "gae", "geo_mean_loss", "get_preset", "group_mean_std", "grpo", "gspo_loss",
    "gspo_token_loss", "icepop_correction", "init_kl_controller", "kl_abs", "kl_cov_loss", "kl_k1", "kl_k2", "kl_k3",
    "kl_penalty", "log_mismatch",
    "logprobs_from_logits", "masked_mean", "masked_sum", "masked_var", "masked_whiten", "mse_value_loss",
    "no_correction", "ppo_clip_loss", "preset_names", "reinforce_loss", "resolve_adv_estimator",
    "resolve_rollout_correction", "reinforce_plus_plus", "reinforce_plus_plus_baseline", "rloo", "sapo_loss",
    "sequence_geometric_mask", "sequence_log_ratio",
    "token_logprobs_and_entropy", "truncated_is_correction", "truncated_is_weights", "turn_ends_from_mask",
    "turn_ends_from_rewards", "update_kl_controller",
]
