"""A run's config turned into the typed settings each stage takes, and the config as the run folder keeps it."""

from __future__ import annotations

import json
import os
from typing import Any

from ragen_jax.algos.presets import resolve_adv_estimator
from ragen_jax.rollout import RolloutConfig
from ragen_jax.trainer import report
from ragen_jax.trainer.steps import AlgoSettings


def rollout_config(cfg) -> RolloutConfig:
    r = cfg.rollout
    return RolloutConfig(
        max_turn=cfg.env.max_turn, max_actions_per_turn=cfg.env.max_actions_per_turn,
        max_actions_per_traj=cfg.env.max_actions_per_traj, response_length=r.response_length,
        max_model_len=r.max_model_len, temperature=r.temperature, top_p=r.top_p, top_k=r.top_k,
        enable_think=r.enable_think, stop_at_answer=r.stop_at_answer, action_sep=r.action_sep,
        context_mode=r.context_mode,
        context_window=r.context_window, prompt_style=r.prompt_style, prompt_max_tokens=r.prompt_max_tokens,
        use_turn_scores=r.use_turn_scores,
        format_penalty=r.format_penalty,
        reward_norm_method=r.reward_norm_method, reward_norm_grouping=r.reward_norm_grouping)


def validation_sampling(cfg) -> dict[str, Any]:
    """The sampling keywords of a validation rollout (engine.run's): config.val's temperature, greedy, top_p and
    top_k, never the training rollout's top_p / top_k (RAGEN validates with veRL's val_kwargs)."""
    v = cfg.val
    return dict(temperature=v.temperature, greedy=v.greedy, top_p=v.top_p, top_k=v.top_k)


def truncated_sampling_warning(cfg) -> str | None:
    """Why a sampler-mismatch correction (or the TIS cap) misreads a run whose rollouts sample with top-p/top-k,
    else None. The sampler's log-probs are of the truncated distribution (vLLM's processed_logprobs, as veRL asks
    for), the recomputed ones of the whole one, so rho = pi_old / pi_sampler is the kept mass (< 1) on every token
    even with no policy drift: icepop / seq_geo_mask drop tokens and TIS down-weights them for the truncation."""
    a, r = cfg.algo, cfg.rollout
    correcting = [f"algo.rollout_correction={a.rollout_correction!r}"] if a.rollout_correction != "none" else []
    correcting += [f"algo.tis_cap={a.tis_cap}"] if a.tis_cap else []
    truncating = ([f"rollout.top_p={r.top_p}"] if r.top_p < 1.0 else []) + (
        [f"rollout.top_k={r.top_k}"] if r.top_k > 0 else [])
    if not (correcting and truncating):
        return None
    return (f"{' and '.join(correcting)} with {' and '.join(truncating)}: the sampler's log-probs are of the "
            "truncated distribution and the update's of the whole one, so the correction sees the kept mass as a "
            "mismatch on every token and drops or down-weights them for it. Sample training rollouts with "
            "rollout.top_p=1.0 and rollout.top_k=-1, or turn the correction off.")


def parse_algo_kwargs(text: str) -> tuple[tuple[str, Any], ...]:
    """config.algo.kwargs (a JSON object; "" = none) -> sorted (name, value) pairs, lists as tuples (hashable)."""
    if not text.strip():
        return ()
    try:
        data = json.loads(text)
    except ValueError as e:
        raise ValueError(f"config.algo.kwargs={text!r} is not JSON ({e}); write an object such as "
                         """'{"scale": 2.0}'""") from None
    if not isinstance(data, dict):
        raise ValueError(f"config.algo.kwargs={text!r} must be a JSON object of keyword: value, such as "
                         """'{"scale": 2.0}'""")

    def frozen(value):
        if isinstance(value, list):
            return tuple(frozen(v) for v in value)
        if isinstance(value, dict):
            raise ValueError(f"config.algo.kwargs: {value!r} is an object; give numbers, strings, booleans or "
                             "lists of them")
        return value

    return tuple(sorted((key, frozen(value)) for key, value in data.items()))


def algo_settings(cfg) -> AlgoSettings:
    a = cfg.algo
    return AlgoSettings(
        adv_estimator=a.custom_adv_estimator or resolve_adv_estimator(dict(a)),
        policy_loss=a.custom_policy_loss or a.policy_loss, value_loss=a.value_loss,
        loss_agg_mode=a.loss_agg_mode, gamma=a.gamma, lam=a.lam, high_level_gamma=a.high_level_gamma,
        norm_adv_by_std_in_grpo=a.norm_adv_by_std_in_grpo, clip_ratio_low=a.clip_ratio_low,
        clip_ratio_high=a.clip_ratio_high, clip_ratio_c=a.clip_ratio_c or None,
        cliprange_value=a.cliprange_value, entropy_coeff=a.entropy_coeff, use_kl_loss=a.use_kl_loss,
        kl_loss_coef=a.kl_loss_coef, kl_loss_type=a.kl_loss_type, tis_cap=a.tis_cap or None,
        temperature=cfg.rollout.temperature if a.temperature_in_logprobs else 1.0,
        logprob_chunk=cfg.trainer.logprob_chunk, rollout_correction=a.rollout_correction,
        rollout_correction_bound=a.rollout_correction_bound or None, critic_loss_agg_mode=a.critic_loss_agg_mode,
        loss_scope=a.loss_scope, loss_scale_factor=a.loss_scale_factor or None, bi_level_turn_ends=a.bi_level_turn_ends,
        soft_advantage_reweight=a.soft_advantage_reweight, grpo_advantage_length_weight=a.grpo_advantage_length_weight,
        zero_task_advantage=a.zero_task_advantage, kwargs=parse_algo_kwargs(a.kwargs),
        clip_cov_ratio=a.clip_cov_ratio, clip_cov_lb=a.clip_cov_lb, clip_cov_ub=a.clip_cov_ub,
        kl_cov_ratio=a.kl_cov_ratio, ppo_kl_coef=a.ppo_kl_coef, tau_pos=a.tau_pos, tau_neg=a.tau_neg)


def write_config_json(folder: str, cfg) -> str:
    """folder/config.json: the resolved config, plus the custom functions it names (module:name and file)."""
    os.makedirs(folder, exist_ok=True)
    data = json.loads(report.resolved_config(cfg))
    data["custom_functions"] = report.custom_functions(cfg)
    path = os.path.join(folder, "config.json")
    with open(path, "w") as f:
        json.dump(data, f, indent=2)
    return path


# keys a resume changes by design (resume itself) or that do not steer the run (where it writes)
RESUME_FREE_KEYS = ("trainer.resume", "workdir")


def config_changes(before: dict, after: dict, limit: int = 12) -> list[str]:
    """"key: before -> after" for each setting that differs between two resolved configs (config.json's
    contents), except RESUME_FREE_KEYS and `custom_functions`; at most `limit` lines and a count of the rest."""
    from ragen_jax.monitoring import flatten_config

    old, new = (flatten_config({k: v for k, v in c.items() if k != "custom_functions"}) for c in (before, after))
    shown = lambda flat, k: repr(flat[k]) if k in flat else "(absent)"  # noqa: E731
    changes = [f"{k}: {shown(old, k)} -> {shown(new, k)}" for k in sorted(old.keys() | new.keys())
               if k not in RESUME_FREE_KEYS and (k in old, old.get(k)) != (k in new, new.get(k))]
    return changes[:limit] + ([f"... and {len(changes) - limit} more"] if len(changes) > limit else [])


def resumed_config_warning(folder: str, cfg) -> str | None:
    """What a resume changes against the config the run last ran with (folder/config.json), or None when
    nothing does (or no config.json is there)."""
    path = os.path.join(folder, "config.json")
    try:
        with open(path) as f:
            before = json.load(f)
    except (OSError, ValueError):
        return None
    changes = config_changes(before, json.loads(report.resolved_config(cfg)))
    if not changes:
        return None
    return (f"This resume's config differs from the one the run in {folder} last ran with ({path}): "
            f"{'; '.join(changes)}. The resumed steps follow the new values, so they do not continue the run as it "
            "would have gone on (a changed trainer.total_steps also stretches a warmup or cosine lr schedule). "
            "config.json now holds the new config. Give the old values on the command line to continue as before.")


def env_tag(name: str) -> str:
    """The metric prefix of an env name: the class name of an import path ("my_pkg.envs:GuessNumber")."""
    return name.rsplit(":", 1)[-1]


def validation_envs(val_name: str, train_name: str) -> list[str]:
    """The env names a validation plays: `val.name` "" is the training env; several are comma-separated
    ("Bandit,BanditTest", RAGEN's es_manager.val tags), each played with `val.groups` groups."""
    names = [name.strip() for name in (val_name or train_name).split(",")]
    if not all(names) or len(set(names)) != len(names):
        raise ValueError(f"val.name={val_name!r}: give one env name, or several distinct ones separated by commas "
                         "(e.g. 'Bandit,BanditTest').")
    return names
