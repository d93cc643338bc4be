"""A user's advantage estimator or policy loss checked against its contract (docs/custom_losses.md) on small
abstract inputs, before any model is loaded: a wrong signature or output shape is one config error naming the
function, what it did and what it must do, instead of a traceback from inside the jitted update after the first
rollout."""

from __future__ import annotations

from typing import Any, Callable

import jax
import jax.numpy as jnp

from ragen_jax.algos.advantages import AdvantageInputs, call_with_supported

B, T = 4, 8  # the probe's rows and tokens
_DOC = "(docs/custom_losses.md)"


def _shapes(out: Any) -> str:
    """What a function returned, as its structure of shapes: "(f32[4], f32[4])", "f32[4, 8]", "dict"."""
    if isinstance(out, (tuple, list)):
        inner = ", ".join(_shapes(x) for x in out)
        return f"({inner}{',' if len(out) == 1 else ''})"
    if hasattr(out, "shape") and hasattr(out, "dtype"):
        return f"{jnp.dtype(out.dtype).name}[{', '.join(str(d) for d in out.shape)}]"
    return type(out).__name__


def _failure(error: Exception) -> str:
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    return f"{type(error).__name__}: {lines[0][:200] if lines else ''}"


def _is_token_array(x: Any) -> bool:
    return hasattr(x, "shape") and tuple(x.shape) == (B, T)


def advantage_estimator_problem(fn: Callable, name: str, **hparams) -> str | None:
    """Why `fn` breaks `fn(inputs: AdvantageInputs, **hparams) -> (advantages [B, T], returns [B, T])`, or None."""
    tokens, rows = jax.ShapeDtypeStruct((B, T), jnp.float32), jax.ShapeDtypeStruct((B,), jnp.int32)
    ends = jax.ShapeDtypeStruct((B, T), jnp.bool_)

    def call(rewards, mask, values, groups, turn_ends, episodes):
        inputs = AdvantageInputs(token_level_rewards=rewards, response_mask=mask, values=values, group_ids=groups,
                                 turn_end_mask=turn_ends, episode_ids=episodes)
        return call_with_supported(fn, inputs, **hparams)

    contract = "fn(inputs: AdvantageInputs, **hparams) -> (advantages [B, T], returns [B, T])"
    try:
        out = jax.eval_shape(call, tokens, tokens, tokens, rows, ends, rows)
    except Exception as e:  # noqa: BLE001 - whatever it raised, the user's function is the culprit
        return f"advantage estimator {name} failed on inputs of [B, T] = [{B}, {T}] ({_failure(e)}); it must be " \
               f"{contract} {_DOC}"
    if isinstance(out, (tuple, list)) and len(out) == 2 and all(_is_token_array(x) for x in out):
        return None
    return f"advantage estimator {name} returned {_shapes(out)} for inputs of [B, T] = [{B}, {T}]; it must be " \
           f"{contract} {_DOC}"


def policy_loss_problem(fn: Callable, name: str, **hparams) -> str | None:
    """Why `fn` breaks `fn(logprobs, old_logprobs, advantages, response_mask, **hparams) -> (loss [B, T], metrics
    dict)`, or None. hparams may hold arrays of [B, T] (sampler_logprobs) as ShapeDtypeStructs."""
    tokens = jax.ShapeDtypeStruct((B, T), jnp.float32)
    arrays = {k: v for k, v in hparams.items() if isinstance(v, jax.ShapeDtypeStruct)}
    static = {k: v for k, v in hparams.items() if k not in arrays}

    def call(logprobs, old, adv, mask, arrays):
        return call_with_supported(fn, logprobs, old, adv, mask, **arrays, **static)

    contract = "fn(logprobs, old_logprobs, advantages, response_mask, **hparams) -> (loss [B, T], metrics dict)"
    try:
        out = jax.eval_shape(call, tokens, tokens, tokens, tokens, arrays)
    except Exception as e:  # noqa: BLE001
        return f"policy loss {name} failed on inputs of [B, T] = [{B}, {T}] ({_failure(e)}); it must be " \
               f"{contract} {_DOC}"
    if isinstance(out, (tuple, list)) and len(out) == 2 and _is_token_array(out[0]) and isinstance(out[1], dict):
        return None
    return f"policy loss {name} returned {_shapes(out)} for inputs of [B, T] = [{B}, {T}]; it must be {contract} " \
           f"(per-token losses: the aggregation mode reduces them) {_DOC}"
