"""The config's algo section: RAGEN's defaults (algos/presets.py holds them once, as the PPO preset) in the
config's form, and the section a named preset gives."""

from __future__ import annotations

import dataclasses
from typing import Any

from ragen_jax.algos.presets import get_preset
from ragen_jax.config.fields import AT_LEAST_0, POSITIVE, UNIT, Rule, Section, setting


def _ppo(key: str) -> Any:
    """The PPO preset's value of `key` (RAGEN's defaults; algos/presets.py holds them), in the config's form: 0 for
    a correction or horizon that is off (None in the preset), as a command line can set a number but not None."""
    value = get_preset("ppo")[key]
    return {"loss_scale_factor": 0, "tis_cap": 0.0, "rollout_correction_bound": 0.0}.get(key, 0) \
        if value is None else value


@dataclasses.dataclass(frozen=True)
class AlgoSection(Section):
    """The RL algorithm (veRL/RAGEN names; `:grpo`, `:dapo`, ... apply presets from algos/presets.py). Keys that
    name a registry entry take a registered name or 'package.module:function' (docs/custom_losses.md)."""

    preset: str = "ppo"
    adv_estimator: str = _ppo("adv_estimator")
    bi_level_gae: bool = _ppo("bi_level_gae")
    bi_level_turn_ends: str = setting(_ppo("bi_level_turn_ends"), choices=("reward", "turn"))
    high_level_gamma: float = setting(_ppo("high_level_gamma"), UNIT)
    gamma: float = setting(_ppo("gamma"), UNIT)
    lam: float = setting(_ppo("lam"), UNIT)
    norm_adv_by_std_in_grpo: bool = _ppo("norm_adv_by_std_in_grpo")
    policy_loss: str = _ppo("policy_loss")
    value_loss: str = _ppo("value_loss")
    loss_agg_mode: str = _ppo("loss_agg_mode")
    critic_loss_agg_mode: str = _ppo("critic_loss_agg_mode")
    loss_scope: str = setting(_ppo("loss_scope"), choices=("mini_batch", "micro_batch"))
    loss_scale_factor: int = setting(_ppo("loss_scale_factor"),
                                     Rule(lambda v: v >= 0, "must be >= 0 tokens (0 = the padded width)"))
    clip_ratio_low: float = setting(_ppo("clip_ratio_low"), AT_LEAST_0)
    clip_ratio_high: float = setting(_ppo("clip_ratio_high"), AT_LEAST_0)
    # dual-clip's lower bound, as veRL
    clip_ratio_c: float = setting(_ppo("clip_ratio_c"), Rule(lambda v: v == 0 or v > 1, "must be 0 (off) or > 1"))
    cliprange_value: float = _ppo("cliprange_value")
    entropy_coeff: float = _ppo("entropy_coeff")
    use_kl_loss: bool = _ppo("use_kl_loss")
    kl_loss_coef: float = setting(_ppo("kl_loss_coef"), AT_LEAST_0)
    kl_loss_type: str = _ppo("kl_loss_type")
    use_kl_in_reward: bool = _ppo("use_kl_in_reward")
    kl_penalty: str = _ppo("kl_penalty")
    kl_ctrl_type: str = setting(_ppo("kl_ctrl_type"), choices=("fixed", "adaptive"))
    kl_ctrl_coef: float = setting(_ppo("kl_ctrl_coef"), AT_LEAST_0)
    kl_ctrl_target: float = setting(_ppo("kl_ctrl_target"), POSITIVE)
    kl_ctrl_horizon: float = setting(_ppo("kl_ctrl_horizon"), POSITIVE)
    tis_cap: float = _ppo("tis_cap")  # 0 = off
    clip_cov_ratio: float = setting(_ppo("clip_cov_ratio"), Rule(
        lambda v: 0 < v <= 1, "must be in (0, 1], a share of the response tokens (veRL: 0.0002)"))
    clip_cov_lb: float = _ppo("clip_cov_lb")
    clip_cov_ub: float = _ppo("clip_cov_ub")
    kl_cov_ratio: float = setting(_ppo("kl_cov_ratio"), Rule(
        lambda v: 0 < v <= 1, "must be in (0, 1], a share of the response tokens (veRL: 0.0002)"))
    ppo_kl_coef: float = setting(_ppo("ppo_kl_coef"), AT_LEAST_0)
    tau_pos: float = setting(_ppo("tau_pos"), POSITIVE)
    tau_neg: float = setting(_ppo("tau_neg"), POSITIVE)
    rollout_correction: str = _ppo("rollout_correction")
    rollout_correction_bound: float = _ppo("rollout_correction_bound")  # 0 = the correction's default
    use_critic: bool = _ppo("use_critic")
    soft_advantage_reweight: bool = _ppo("soft_advantage_reweight")
    grpo_advantage_length_weight: bool = _ppo("grpo_advantage_length_weight")
    zero_task_advantage: bool = _ppo("zero_task_advantage")
    custom_policy_loss: str = ""  # "package.module:function" overrides policy_loss
    custom_adv_estimator: str = ""  # "package.module:function" overrides adv_estimator
    kwargs: str = ""  # JSON object of more keywords for your estimator/losses: '{"scale": 2.0}'
    temperature_in_logprobs: bool = True  # divide logits by the rollout temperature (veRL)


def algo_preset_values(name: str) -> dict[str, Any]:
    """The algo section of preset `name`, in the config's form: the preset's values, and every other entry (the
    custom functions, kwargs, temperature_in_logprobs) at its default."""
    values = get_preset(name)
    values.pop("name")
    for key in ("tis_cap", "rollout_correction_bound", "loss_scale_factor"):
        if values[key] is None:
            values[key] = _ppo(key)
    defaults = AlgoSection()
    return {f.name: values.get(f.name, getattr(defaults, f.name)) for f in dataclasses.fields(AlgoSection)} | {
        "preset": name}
