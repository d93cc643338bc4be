"""Loss aggregation modes (veRL's ``loss_agg_mode``) split into numerator and denominator.

``loss = numerator(loss_mat, mask) / denominator(mask)``. Numerators add over any split of the
batch rows, so gradient accumulation is exact: for micro-batches i of one mini-batch,
``sum_i grad(numerator_i) / denominator(full_mask)`` equals ``grad(loss)`` of the full batch.
For every built-in mode but ``seq-mean-token-sum-norm`` the denominators add over rows too; that
mode divides by a horizon: the padded width, or a constant ``loss_scale_factor`` (veRL's knob) so
the scale does not move with the batch's width. A denominator that takes a ``loss_scale_factor``
keyword receives it; the others are called with the mask alone.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import chex
import jax
import jax.numpy as jnp

from ragen_jax.algos.advantages import call_with_supported
from ragen_jax.algos.registry import AGG_MODES


class AggMode(NamedTuple):
    """numerator(loss_mat [B, T], mask [B, T]) -> scalar; denominator(mask [B, T]) -> scalar."""

    numerator: Callable[[jax.Array, jax.Array], jax.Array]
    denominator: Callable[[jax.Array], jax.Array]


def _rows(mask: jax.Array) -> tuple[jax.Array, jax.Array]:
    """Per-row token counts [B] and whether each row has any token [B]."""
    counts = mask.astype(jnp.float32).sum(axis=-1)
    return counts, counts > 0


def _masked_row_sums(loss_mat: jax.Array, mask: jax.Array) -> jax.Array:
    return jnp.where(mask.astype(bool), loss_mat, 0.0).sum(axis=-1)


def _token_count(mask: jax.Array) -> jax.Array:
    return mask.astype(jnp.float32).sum()


def _nonempty_rows(mask: jax.Array) -> jax.Array:
    return _rows(mask)[1].astype(jnp.float32).sum()


def _seq_token_means(loss_mat: jax.Array, mask: jax.Array) -> jax.Array:
    counts, nonempty = _rows(mask)
    return jnp.where(nonempty, _masked_row_sums(loss_mat, mask) / jnp.maximum(counts, 1.0), 0.0).sum()


def _token_sum(loss_mat: jax.Array, mask: jax.Array) -> jax.Array:
    return _masked_row_sums(loss_mat, mask).sum()


def _horizon(mask: jax.Array, loss_scale_factor: int | None = None) -> jax.Array:
    """The constant ``loss_scale_factor`` when given (> 0), else the padded width T of mask [B, T]."""
    if loss_scale_factor is not None and loss_scale_factor <= 0:
        raise ValueError(f"loss_scale_factor must be a positive number of tokens or None (the padded width), "
                         f"got {loss_scale_factor!r}.")
    return jnp.asarray(loss_scale_factor or mask.shape[-1], jnp.float32)


# token-mean: mean over all sampled tokens of the batch (PPO, DAPO).
AGG_MODES.register("token-mean", AggMode(_token_sum, _token_count))
# seq-mean-token-mean: mean over rows of each row's token mean (GRPO). Empty rows are skipped.
AGG_MODES.register("seq-mean-token-mean", AggMode(_seq_token_means, _nonempty_rows))
# seq-mean-token-sum: mean over rows of each row's token sum (Dr.GRPO). Empty rows are skipped.
AGG_MODES.register("seq-mean-token-sum", AggMode(_token_sum, _nonempty_rows))
# seq-mean-token-sum-norm: total token sum / horizon (Dr.GRPO's MAX_TOKENS): the padded width T as veRL's
# default and RAGEN, or the constant loss_scale_factor.
AGG_MODES.register("seq-mean-token-sum-norm", AggMode(_token_sum, _horizon))


def _mode(mode: str | AggMode) -> AggMode:
    agg = mode if isinstance(mode, AggMode) else AGG_MODES.get(mode)
    if not isinstance(agg, AggMode):
        raise TypeError(f"Aggregation mode {mode!r} must resolve to an AggMode(numerator, denominator), got {agg!r}.")
    return agg


def agg_numerator(loss_mat: jax.Array, mask: jax.Array, mode: str | AggMode = "token-mean") -> jax.Array:
    """The additive part of an aggregated loss. loss_mat/mask [B, T] -> scalar."""
    chex.assert_rank([loss_mat, mask], 2)
    chex.assert_equal_shape([loss_mat, mask])
    return _mode(mode).numerator(loss_mat, mask)


def agg_denominator(mask: jax.Array, mode: str | AggMode = "token-mean",
                    loss_scale_factor: int | None = None) -> jax.Array:
    """The normaliser of the full batch (tokens, non-empty rows or horizon). mask [B, T] -> scalar.

    ``loss_scale_factor`` goes to a denominator that accepts it (``seq-mean-token-sum-norm``'s horizon)."""
    chex.assert_rank(mask, 2)
    return call_with_supported(_mode(mode).denominator, mask, loss_scale_factor=loss_scale_factor)


def agg_parts(loss_mat: jax.Array, mask: jax.Array, mode: str | AggMode = "token-mean",
              loss_scale_factor: int | None = None) -> tuple[jax.Array, jax.Array]:
    """(numerator, denominator) of this batch; accumulate numerators, divide by the global one."""
    return agg_numerator(loss_mat, mask, mode), agg_denominator(mask, mode, loss_scale_factor)


def agg_loss(loss_mat: jax.Array, mask: jax.Array, mode: str | AggMode = "token-mean",
             denominator: jax.Array | float | None = None, loss_scale_factor: int | None = None) -> jax.Array:
    """Aggregate a per-token loss into a scalar; pass the mini-batch ``denominator`` when the
    batch is one micro-batch of it (the result then sums to the mini-batch loss).
    """
    num = agg_numerator(loss_mat, mask, mode)
    den = agg_denominator(mask, mode, loss_scale_factor) if denominator is None else denominator
    return num / jnp.maximum(den, 1e-8)
