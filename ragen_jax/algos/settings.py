"""The algorithm settings the update's jitted functions close over, resolved from a config's algo section, and the
keywords each registered function receives from them."""

from __future__ import annotations

import dataclasses
import inspect
import json
from typing import Any, Callable

import jax
import jax.numpy as jnp

from ragen_jax.algos.policy_loss import ROLLOUT_WEIGHTS_KEY
from ragen_jax.algos.presets import get_preset, resolve_adv_estimator
from ragen_jax.algos.registry import POLICY_LOSSES

_PPO = get_preset("ppo")  # RAGEN's defaults (algos/presets.py holds them once)


@dataclasses.dataclass(frozen=True)
class AlgoSettings:
    """The algorithm knobs the jitted functions close over (hashable, static).

    rollout_correction names an entry of ROLLOUT_CORRECTIONS (sampler/trainer mismatch);
    rollout_correction_bound None takes that correction's default bound.
    """

    adv_estimator: str | Callable
    policy_loss: str | Callable
    value_loss: str
    loss_agg_mode: str
    gamma: float
    lam: float
    high_level_gamma: float
    norm_adv_by_std_in_grpo: bool
    clip_ratio_low: float
    clip_ratio_high: float
    clip_ratio_c: float | None
    cliprange_value: float
    entropy_coeff: float
    use_kl_loss: bool
    kl_loss_coef: float
    kl_loss_type: str
    tis_cap: float | None
    temperature: float
    logprob_chunk: int
    rollout_correction: str | Callable = _PPO["rollout_correction"]
    rollout_correction_bound: float | None = _PPO["rollout_correction_bound"]
    critic_loss_agg_mode: str = _PPO["critic_loss_agg_mode"]
    loss_scope: str = _PPO["loss_scope"]
    loss_scale_factor: int | None = _PPO["loss_scale_factor"]
    bi_level_turn_ends: str = _PPO["bi_level_turn_ends"]
    soft_advantage_reweight: bool = _PPO["soft_advantage_reweight"]
    grpo_advantage_length_weight: bool = _PPO["grpo_advantage_length_weight"]
    zero_task_advantage: bool = _PPO["zero_task_advantage"]
    kwargs: tuple[tuple[str, Any], ...] = ()  # config.algo.kwargs: more keywords for the functions that name them
    # veRL's actor.policy_loss.* (clip_cov, kl_cov) and actor.tau_* (sapo)
    clip_cov_ratio: float = _PPO["clip_cov_ratio"]
    clip_cov_lb: float = _PPO["clip_cov_lb"]
    clip_cov_ub: float = _PPO["clip_cov_ub"]
    kl_cov_ratio: float = _PPO["kl_cov_ratio"]
    ppo_kl_coef: float = _PPO["ppo_kl_coef"]
    tau_pos: float = _PPO["tau_pos"]
    tau_neg: float = _PPO["tau_neg"]

    @classmethod
    def of(cls, run: Any) -> "AlgoSettings":
        """The settings of a RunConfig (`ragen_jax.config`): its algo section resolved (the custom functions it
        names, the estimator its preset keys select, 0 = off as None, kwargs parsed), the rollout temperature the
        log-probs divide by (1 at temperature 0: greedy rollouts report unscaled log-probs, as vLLM) and the
        trainer's log-prob chunk."""
        a = run.algo
        same = {f.name: getattr(a, f.name) for f in dataclasses.fields(cls) if hasattr(a, f.name)}
        temperature = run.rollout.temperature
        return cls(**{**same, **dict(
            adv_estimator=a.custom_adv_estimator or resolve_adv_estimator(vars(a)),
            policy_loss=a.custom_policy_loss or a.policy_loss, clip_ratio_c=a.clip_ratio_c or None,
            tis_cap=a.tis_cap or None, rollout_correction_bound=a.rollout_correction_bound or None,
            loss_scale_factor=a.loss_scale_factor or None, kwargs=parse_algo_kwargs(a.kwargs),
            temperature=temperature if a.temperature_in_logprobs and temperature > 0 else 1.0,
            logprob_chunk=run.trainer.logprob_chunk)})


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


def advantage_hparams(algo: AlgoSettings) -> dict[str, Any]:
    """The keywords an advantage estimator may take (each receives those its signature names)."""
    return dict(gamma=algo.gamma, lam=algo.lam, high_level_gamma=algo.high_level_gamma,
                norm_adv_by_std_in_grpo=algo.norm_adv_by_std_in_grpo, **dict(algo.kwargs))


def policy_loss_hparams(algo: AlgoSettings, policy_fn: Any) -> dict[str, Any]:
    """The keywords policy loss `policy_fn` may take besides the [B, T] array sampler_logprobs. The keys of veRL's
    clip_cov / kl_cov / sapo go only to a loss that names them: a custom loss taking **kwargs often hands them on
    to a built-in one (PPO's clip), which would fail on a keyword it does not know."""
    own = dict(clip_cov_ratio=algo.clip_cov_ratio, clip_cov_lb=algo.clip_cov_lb, clip_cov_ub=algo.clip_cov_ub,
               kl_cov_ratio=algo.kl_cov_ratio, ppo_kl_coef=algo.ppo_kl_coef, tau_pos=algo.tau_pos,
               tau_neg=algo.tau_neg)
    named = inspect.signature(policy_fn).parameters
    return dict(clip_ratio_low=algo.clip_ratio_low, clip_ratio_high=algo.clip_ratio_high,
                clip_ratio_c=algo.clip_ratio_c, tis_cap=algo.tis_cap, **{k: v for k, v in own.items() if k in named},
                **dict(algo.kwargs))


def value_loss_hparams(algo: AlgoSettings) -> dict[str, Any]:
    """The keywords a value loss may take."""
    return dict(cliprange_value=algo.cliprange_value, **dict(algo.kwargs))


# what the update passes besides config.algo.kwargs: a kwarg may not take one of these names
BUILT_IN_KEYWORDS = ("gamma", "lam", "high_level_gamma", "norm_adv_by_std_in_grpo", "clip_ratio_low",
                     "clip_ratio_high", "clip_ratio_c", "tis_cap", "cliprange_value", "sampler_logprobs",
                     "clip_cov_ratio", "clip_cov_lb", "clip_cov_ub", "kl_cov_ratio", "ppo_kl_coef", "tau_pos",
                     "tau_neg", ROLLOUT_WEIGHTS_KEY)


def algo_contract_problems(algo: AlgoSettings) -> list[str]:
    """What breaks the contracts of the advantage estimator and policy loss `algo` names (with the keywords the
    update passes them), checked on small abstract inputs; the built-ins, tested elsewhere, are skipped."""
    from ragen_jax.algos.contracts import B, T, advantage_estimator_problem, policy_loss_problem
    from ragen_jax.algos.registry import ADVANTAGE_ESTIMATORS

    def custom(fn):
        return not (getattr(fn, "__module__", "") or "").startswith("ragen_jax.")

    problems = []
    adv_fn, loss_fn = ADVANTAGE_ESTIMATORS.get(algo.adv_estimator), POLICY_LOSSES.get(algo.policy_loss)
    if custom(adv_fn):
        problems.append(advantage_estimator_problem(adv_fn, repr(algo.adv_estimator), **advantage_hparams(algo)))
    if custom(loss_fn):
        problems.append(policy_loss_problem(loss_fn, repr(algo.policy_loss), **policy_loss_hparams(algo, loss_fn),
                                            sampler_logprobs=jax.ShapeDtypeStruct((B, T), jnp.float32)))
    return [p for p in problems if p]


