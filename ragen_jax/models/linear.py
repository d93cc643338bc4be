"""Dense layers computed on flattened rows.

A projection of `x [B, T, in]` written as one dot over the last axis has a weight gradient that contracts two
axes (B and T). XLA:CPU lowers that contraction by first copying the incoming [B, T, out] gradient into a
transposed layout, which cost 18% of the medium update's op time (`experiments/profile_steps.py update --size
medium`). On [B*T, in] rows the weight gradient is a single GEMM over one contracting axis and no copy is made,
which took the medium update from 0.67x to 0.81x PyTorch's speed and the tiny one from 0.74x to 1.00x
(docs/performance.md). The reshape is free (a bitcast) and the values are identical.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from flax import nnx


def rows_matmul(x: jax.Array, w: jax.Array, *, w_out_first: bool = False,
                preferred_element_type=None) -> jax.Array:
    """x [..., D] @ w -> [..., N], as one [prod(...), D] GEMM. w is [D, N], or [N, D] when `w_out_first` (a tied
    embedding used as the output head)."""
    d = x.shape[-1]
    contract_w = 1 if w_out_first else 0
    if w.ndim != 2 or w.shape[contract_w] != d:
        raise ValueError(f"rows_matmul: x {x.shape} and w {w.shape} do not share the contracted axis "
                         f"(w_out_first={w_out_first}).")
    y = jax.lax.dot_general(x.reshape(-1, d), w, (((1,), (contract_w,)), ((), ())),
                            preferred_element_type=preferred_element_type)
    return y.reshape(*x.shape[:-1], y.shape[-1])


class Linear(nnx.Linear):
    """`nnx.Linear` (same parameters, names and numerics) applied to the input's rows flattened to [N, in]."""

    def __call__(self, x: jax.Array) -> jax.Array:
        y = super().__call__(x.reshape(-1, x.shape[-1]))
        return y.reshape(*x.shape[:-1], y.shape[-1])


__all__ = ["Linear", "rows_matmul"]
