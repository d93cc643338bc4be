"""Algorithm presets by name (RAGEN's PPO / GRPO / DAPO / Dr.GRPO), as flat config dicts.

Keys mirror veRL/RAGEN config names: ``adv_estimator`` (algorithm.adv_estimator),
``norm_adv_by_std_in_grpo``, ``loss_agg_mode``, ``clip_ratio_low/high``, ``clip_ratio_c``,
``cliprange_value``, ``entropy_coeff``, ``use_kl_loss``/``kl_loss_coef``/``kl_loss_type``,
``use_kl_in_reward``/``kl_penalty``/``kl_ctrl_*``, ``gamma``, ``lam``, ``use_critic``.
"""

from __future__ import annotations

import copy
from typing import Any

# RAGEN's defaults (config/base.yaml + veRL ppo_trainer) that every preset starts from.
_BASE: dict[str, Any] = {
    "adv_estimator": "gae",
    "bi_level_gae": False,
    "high_level_gamma": 0.95,
    "gamma": 1.0,
    "lam": 1.0,
    "norm_adv_by_std_in_grpo": True,
    "policy_loss": "vanilla",
    "value_loss": "clipped",
    "loss_agg_mode": "token-mean",
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
    "use_critic": True,
}

_OVERRIDES: dict[str, dict[str, Any]] = {
    # PPO = GAE + token-mean (RAGEN's default Sokoban run).
    "ppo": {},
    # DAPO = PPO with clip-higher 0.2 / 0.28 and no KL.
    "dapo": {"clip_ratio_low": 0.2, "clip_ratio_high": 0.28, "use_kl_loss": False,
             "use_kl_in_reward": False},
    # GRPO = group-normalised outcome advantage (with std) + seq-mean-token-mean, no critic.
    "grpo": {"adv_estimator": "grpo", "norm_adv_by_std_in_grpo": True,
             "loss_agg_mode": "seq-mean-token-mean", "use_critic": False},
    # Dr.GRPO = GRPO without std normalisation + seq-mean-token-sum, no critic.
    "drgrpo": {"adv_estimator": "grpo", "norm_adv_by_std_in_grpo": False,
               "loss_agg_mode": "seq-mean-token-sum", "use_critic": False},
}


def preset_names() -> list[str]:
    return sorted(_OVERRIDES)


def get_preset(name: str) -> dict[str, Any]:
    """A fresh config dict for a preset name ("ppo", "grpo", "dapo", "drgrpo")."""
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
