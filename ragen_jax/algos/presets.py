"""Algorithm presets by name (RAGEN's PPO / GRPO / DAPO / Dr.GRPO, plus GSPO, CISPO, GMPO and SAPO), as flat
config dicts.

Keys mirror veRL/RAGEN config names: ``adv_estimator`` (algorithm.adv_estimator),
``norm_adv_by_std_in_grpo``, ``loss_agg_mode``, ``clip_ratio_low/high``, ``clip_ratio_c``,
``cliprange_value``, ``entropy_coeff``, ``use_kl_loss``/``kl_loss_coef``/``kl_loss_type``,
``use_kl_in_reward``/``kl_penalty``/``kl_ctrl_*``, ``gamma``, ``lam``, ``use_critic``;
``rollout_correction``/``rollout_correction_bound`` name a sampler-mismatch correction
(algos.rollout_correction; veRL's algorithm.rollout_correction); ``clip_cov_ratio``, ``clip_cov_lb``,
``clip_cov_ub``, ``kl_cov_ratio``, ``ppo_kl_coef`` (veRL's actor.policy_loss.*) and ``tau_pos``/``tau_neg``
(actor.*) tune the clip_cov, kl_cov and sapo losses.
"""

from __future__ import annotations

import copy
from typing import Any

from ragen_jax.algos.policy_loss import (CISPO_CLIP_HIGH, CISPO_CLIP_LOW, CLIP_COV_LB, CLIP_COV_UB, COV_RATIO,
                                         GMPO_CLIP, GSPO_CLIP_HIGH, GSPO_CLIP_LOW, PPO_KL_COEF, SAPO_TAU_NEG,
                                         SAPO_TAU_POS)

# RAGEN's defaults (config/base.yaml + veRL ppo_trainer) that every preset starts from.
_BASE: dict[str, Any] = {
    "adv_estimator": "gae",
    "bi_level_gae": False,
    "bi_level_turn_ends": "reward",  # RAGEN: turns end at non-zero rewards; "turn": at every assistant turn's end
    "high_level_gamma": 0.95,
    "gamma": 1.0,
    "lam": 1.0,
    "norm_adv_by_std_in_grpo": True,
    "policy_loss": "vanilla",
    "value_loss": "clipped",
    "loss_agg_mode": "token-mean",
    "critic_loss_agg_mode": "token-mean",  # RAGEN's critic calls veRL's value loss without a mode: token-mean
    "loss_scope": "mini_batch",  # "micro_batch": each micro-batch aggregated alone (veRL 0.4 / RAGEN)
    "loss_scale_factor": None,  # seq-mean-token-sum-norm's constant horizon in tokens (None: the padded width)
    "clip_ratio_low": 0.2,
    "clip_ratio_high": 0.28,
    "clip_ratio_c": 3.0,
    "cliprange_value": 0.5,
    "entropy_coeff": 0.001,
    "use_kl_loss": False,
    "kl_loss_coef": 0.0,
    "kl_loss_type": "kl",
    "use_kl_in_reward": False,
    "kl_penalty": "kl",
    "kl_ctrl_type": "fixed",
    "kl_ctrl_coef": 0.0,
    "kl_ctrl_target": 0.1,
    "kl_ctrl_horizon": 10000.0,
    "tis_cap": None,
    # veRL's actor.policy_loss.* of the clip_cov / kl_cov losses, and actor.tau_pos / tau_neg of sapo
    "clip_cov_ratio": COV_RATIO,
    "clip_cov_lb": CLIP_COV_LB,
    "clip_cov_ub": CLIP_COV_UB,
    "kl_cov_ratio": COV_RATIO,
    "ppo_kl_coef": PPO_KL_COEF,
    "tau_pos": SAPO_TAU_POS,
    "tau_neg": SAPO_TAU_NEG,
    "rollout_correction": "none",
    "rollout_correction_bound": None,  # None = the correction's default (DEFAULT_BOUNDS)
    "use_critic": True,
    "soft_advantage_reweight": False,  # scale advantages by group reward std / the largest (RAGEN)
    "grpo_advantage_length_weight": False,  # GRPO: divide advantages by row length / mean length (RAGEN)
    "zero_task_advantage": False,  # zero the advantages: only entropy / KL terms train (RAGEN's ablation)
}

# GRPO's group-normalised outcome advantage (with std), no critic: GRPO, GSPO and CISPO share it.
_GROUP_ADVANTAGE: dict[str, Any] = {"adv_estimator": "grpo", "norm_adv_by_std_in_grpo": True, "use_critic": False}

_OVERRIDES: dict[str, dict[str, Any]] = {
    # PPO = GAE + token-mean (RAGEN's default Sokoban run).
    "ppo": {},
    # DAPO = PPO with clip-higher 0.2 / 0.28 and no KL.
    "dapo": {"clip_ratio_low": 0.2, "clip_ratio_high": 0.28, "use_kl_loss": False,
             "use_kl_in_reward": False},
    # GRPO = group-normalised outcome advantage (with std) + seq-mean-token-mean, no critic.
    "grpo": {**_GROUP_ADVANTAGE, "loss_agg_mode": "seq-mean-token-mean"},
    # Dr.GRPO = GRPO without std normalisation + seq-mean-token-sum, no critic.
    "drgrpo": {**_GROUP_ADVANTAGE, "norm_adv_by_std_in_grpo": False, "loss_agg_mode": "seq-mean-token-sum"},
    # GSPO (arXiv:2507.18071) = GRPO's advantage + the sequence-level ratio and clip with the paper's ranges
    # 3e-4 / 4e-4; seq-mean-token-mean makes its objective's 1/G sum over sequences.
    "gspo": {**_GROUP_ADVANTAGE, "policy_loss": "gspo", "loss_agg_mode": "seq-mean-token-mean",
             "clip_ratio_low": GSPO_CLIP_LOW, "clip_ratio_high": GSPO_CLIP_HIGH},
    # CISPO (MiniMax-M1, arXiv:2506.13585) = GRPO's advantage + the clipped stop-gradient IS weight: no lower
    # bound, cap 1 + 5 (see policy_loss.CISPO_CLIP_*); token-mean, as its objective divides by all tokens.
    "cispo": {**_GROUP_ADVANTAGE, "policy_loss": "cispo", "loss_agg_mode": "token-mean",
              "clip_ratio_low": CISPO_CLIP_LOW, "clip_ratio_high": CISPO_CLIP_HIGH},
    # GMPO (arXiv:2507.20673; veRL's loss_mode=geo_mean) = GRPO's advantage + the geometric mean of the token
    # ratios clipped in log space to (-0.4, 0.4) (the paper's and veRL's example's); a mean over sequences.
    "gmpo": {**_GROUP_ADVANTAGE, "policy_loss": "geo_mean", "loss_agg_mode": "seq-mean-token-mean",
             "clip_ratio_low": GMPO_CLIP, "clip_ratio_high": GMPO_CLIP},
    # SAPO (arXiv:2511.20347; veRL's loss_mode=sapo) = GRPO's advantage + the soft gate in place of the clip,
    # tau_pos / tau_neg 1.0 / 1.05 (veRL's defaults); a mean over sequences.
    "sapo": {**_GROUP_ADVANTAGE, "policy_loss": "sapo", "loss_agg_mode": "seq-mean-token-mean"},
}


def preset_names() -> list[str]:
    return sorted(_OVERRIDES)


def get_preset(name: str) -> dict[str, Any]:
    """A fresh config dict for a preset name (``preset_names()``: "ppo", "grpo", "gspo", ...)."""
    key = name.lower().replace(".", "").replace("-", "").replace("_", "")
    if key not in _OVERRIDES:
        raise KeyError(f"Unknown algorithm preset {name!r}. Known: {preset_names()}.")
    return {**copy.deepcopy(_BASE), **_OVERRIDES[key], "name": key}


def resolve_adv_estimator(config: dict[str, Any]) -> str:
    """The registry name a config selects: RAGEN's ``adv_estimator=gae`` + ``bi_level_gae=True``
    means "bilevel_gae"; otherwise ``adv_estimator`` itself.
    """
    name = config["adv_estimator"]
    return "bilevel_gae" if name == "gae" and config.get("bi_level_gae", False) else name


# the built-in estimators that read the critic's values (AdvantageInputs.values)
CRITIC_ESTIMATORS = ("gae", "bilevel_gae")


def needs_critic(config: dict[str, Any]) -> bool:
    """Whether the estimator a config selects reads critic values (GAE, bi-level GAE by either name)."""
    return resolve_adv_estimator(config) in CRITIC_ESTIMATORS
