"""KL-to-reference estimators (registered in KL_ESTIMATORS), the reward penalty, KL controllers.

Estimators map (logprobs, ref_logprobs) [B, T] -> per-token KL estimate [B, T] (Schulman's
k1/k2/k3). Names follow veRL: "kl"/"k1", "abs", "mse"/"k2", "low_var_kl"/"k3"; a trailing
"+" ("k1+", "k3+", "low_var_kl+") keeps the value but takes the gradient of k2 (unbiased grad).
"""

from __future__ import annotations

from collections.abc import Callable

import chex
import flax.struct
import jax
import jax.numpy as jnp

from ragen_jax.algos.masked import masked_mean
from ragen_jax.algos.registry import KL_ESTIMATORS


def _check(logprobs: jax.Array, ref_logprobs: jax.Array) -> None:
    chex.assert_equal_shape([logprobs, ref_logprobs])


def kl_k1(logprobs: jax.Array, ref_logprobs: jax.Array) -> jax.Array:
    """k1 = log pi - log pi_ref (unbiased, high variance)."""
    _check(logprobs, ref_logprobs)
    return logprobs - ref_logprobs


def kl_abs(logprobs: jax.Array, ref_logprobs: jax.Array) -> jax.Array:
    """|log pi - log pi_ref|."""
    _check(logprobs, ref_logprobs)
    return jnp.abs(logprobs - ref_logprobs)


def kl_k2(logprobs: jax.Array, ref_logprobs: jax.Array) -> jax.Array:
    """k2 = 0.5 (log pi - log pi_ref)^2."""
    _check(logprobs, ref_logprobs)
    return 0.5 * jnp.square(logprobs - ref_logprobs)


def kl_k3(logprobs: jax.Array, ref_logprobs: jax.Array) -> jax.Array:
    """k3 = exp(d) - d - 1 with d = log pi_ref - log pi clamped to +-20, result clamped to +-10."""
    _check(logprobs, ref_logprobs)
    d = jnp.clip(ref_logprobs - logprobs, -20.0, 20.0)
    return jnp.clip(jnp.exp(d) - d - 1.0, -10.0, 10.0)


def _k2_gradient(value_fn: Callable) -> Callable:
    def fn(logprobs: jax.Array, ref_logprobs: jax.Array) -> jax.Array:
        value = value_fn(logprobs, ref_logprobs)
        grad_path = kl_k2(logprobs, ref_logprobs)
        return grad_path - jax.lax.stop_gradient(grad_path) + jax.lax.stop_gradient(value)

    fn.__doc__ = f"Value of {value_fn.__name__}, gradient of k2."
    return fn


for _names, _fn in ((("kl", "k1"), kl_k1), (("abs",), kl_abs), (("mse", "k2", "k2+", "mse+"), kl_k2),
                    (("low_var_kl", "k3"), kl_k3)):
    for _name in _names:
        KL_ESTIMATORS.register(_name, _fn)
for _names, _fn in ((("kl+", "k1+"), kl_k1), (("low_var_kl+", "k3+"), kl_k3)):
    _plus = _k2_gradient(_fn)
    for _name in _names:
        KL_ESTIMATORS.register(_name, _plus)


def kl_penalty(logprobs: jax.Array, ref_logprobs: jax.Array, kind: str | Callable = "low_var_kl") -> jax.Array:
    """Per-token KL estimate of the named kind. [B, T] -> [B, T]."""
    return KL_ESTIMATORS.get(kind)(logprobs, ref_logprobs)


def apply_kl_penalty(token_level_scores: jax.Array, old_logprobs: jax.Array, ref_logprobs: jax.Array,
                     response_mask: jax.Array, kl_coef: jax.Array | float,
                     kind: str | Callable = "kl") -> tuple[jax.Array, jax.Array]:
    """KL in the reward: rewards = scores - coef * kl on sampled tokens (veRL apply_kl_penalty).

    -> (token_level_rewards [B, T], current_kl scalar = mean over rows of each row's token mean),
    current_kl being what the adaptive controller consumes. Rows without sampled tokens (the all-zero
    rows that pad a filtered batch) are left out of that mean: they would pull it towards 0.
    """
    chex.assert_rank([token_level_scores, old_logprobs, ref_logprobs, response_mask], 2)
    chex.assert_equal_shape([token_level_scores, old_logprobs, ref_logprobs, response_mask])
    kld = jnp.where(response_mask.astype(bool), kl_penalty(old_logprobs, ref_logprobs, kind), 0.0)
    rewards = token_level_scores - kl_coef * kld
    has_tokens = response_mask.astype(bool).any(axis=-1)
    current_kl = masked_mean(masked_mean(kld, response_mask, axis=-1), has_tokens)
    return jax.lax.stop_gradient(rewards), jax.lax.stop_gradient(current_kl)


@flax.struct.dataclass
class KLController:
    """KL coefficient state: fixed, or adaptive (Ziegler et al. 2019) towards ``target``."""

    value: jax.Array
    target: float = 0.1
    horizon: float = 10000.0
    adaptive: bool = flax.struct.field(pytree_node=False, default=False)


def init_kl_controller(kind: str = "fixed", kl_coef: float = 0.001, target_kl: float = 0.1,
                       horizon: float = 10000.0) -> KLController:
    """kind "fixed" or "adaptive" (veRL's ``algorithm.kl_ctrl``)."""
    if kind not in ("fixed", "adaptive"):
        raise ValueError(f"KL controller kind must be 'fixed' or 'adaptive', got {kind!r}.")
    if kind == "adaptive" and horizon <= 0:
        raise ValueError(f"Adaptive KL controller needs horizon > 0, got {horizon}.")
    return KLController(jnp.asarray(kl_coef, jnp.float32), target_kl, horizon, kind == "adaptive")


def update_kl_controller(ctrl: KLController, current_kl: jax.Array | float, n_steps: int) -> KLController:
    """value *= 1 + clip(kl / target - 1, +-0.2) * n_steps / horizon when adaptive; else unchanged."""
    if not ctrl.adaptive:
        return ctrl
    error = jnp.clip(current_kl / ctrl.target - 1.0, -0.2, 0.2)
    return ctrl.replace(value=ctrl.value * (1.0 + error * n_steps / ctrl.horizon))
