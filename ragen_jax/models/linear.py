"""Dense layers computed on flattened rows.

A projection of `x [B, T, in]` written as one dot over the last axis has a weight gradient that contracts two
axes (B and T). XLA:CPU lowers that contraction by first copying the incoming [B, T, out] gradient into a
transposed layout, a copy the size of the activations per projection (`experiments/bench/profile_steps.py update
--size medium` shows it). On [B*T, in] rows the weight gradient is a single GEMM over one contracting axis and
no copy is made (`experiments/bench/bench_train.py`; docs/performance.md, "Update"). The reshape is free (a bitcast)
and the values are identical.

A decode step is the opposite case: a few rows against weights that stream from memory every step. There the
GEMM runs fastest as weight [out, in] @ x^T [in, rows], both operands laid out that way: XLA:CPU's kernel then
reads each weight row contiguously (`out_first_matmul`, `OutFirstLinear`; `experiments/bench/bench_decode_layout.py`).
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


def out_first_matmul(x: jax.Array, w_t: jax.Array, *, preferred_element_type=None) -> jax.Array:
    """x [..., D] against a weight laid out [N, D] -> [..., N], computed as the GEMM w_t [N, D] @ x^T [D, M].

    With few rows M (a decode step) and a weight that does not stay in cache, this form streams the weight faster
    than x @ w, its rows read contiguously (`experiments/bench/bench_decode_layout.py`). Both operands are materialised in that
    layout (optimization barriers): otherwise XLA folds the transposes into the dot's dimension numbers and the
    slow form comes back."""
    d = x.shape[-1]
    if w_t.ndim != 2 or w_t.shape[1] != d:
        raise ValueError(f"out_first_matmul: x {x.shape} and w_t {w_t.shape} (laid out [N, D]) do not share D.")
    x_t = jax.lax.optimization_barrier(x.reshape(-1, d).T)
    y_t = jax.lax.optimization_barrier(jnp.matmul(w_t, x_t, preferred_element_type=preferred_element_type))
    return y_t.T.reshape(*x.shape[:-1], w_t.shape[0])


class OutFirstLinear:
    """A projection whose weight is laid out [out, in] (`out_first_matmul`): the decode loop's stand-in for a
    `Linear` or `LoRALinear` (`transformer.with_decode_weights`). A plain object living inside one traced
    program, never a parameter."""

    def __init__(self, kernel_t: jax.Array, bias: jax.Array | None):
        self.kernel_t, self.bias = kernel_t, bias

    def __call__(self, x: jax.Array, *, preferred_element_type=None) -> jax.Array:
        y = out_first_matmul(x.astype(self.kernel_t.dtype), self.kernel_t,
                             preferred_element_type=preferred_element_type)
        return y if self.bias is None else y + self.bias.astype(y.dtype)


class Linear(nnx.Linear):
    """`nnx.Linear` (same parameters, names and numerics) applied to the input's rows flattened to [N, in]."""

    def __call__(self, x: jax.Array) -> jax.Array:
        y = super().__call__(x.reshape(-1, x.shape[-1]))
        return y.reshape(*x.shape[:-1], y.shape[-1])


__all__ = ["Linear", "OutFirstLinear", "out_first_matmul", "rows_matmul"]
