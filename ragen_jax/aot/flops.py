"""Matmul FLOPs of a traced program, read from its jaxpr.

A compile-only GPU executable reports no cost analysis, and XLA's HLO cost analysis counts a loop's body once
whatever its trip count (the update's micro-batch scan). Here every dot_general counts 2 x batch x M x N x K, a
scan's body times its length, a cond's costlier branch, and cuDNN's fused attention its two (forward) or five
(backward) [T, S] matmuls per head, halved when causal. A while loop's body counts once: the decode program's
figure is one decode step (what a decode roofline needs), and blockwise attention's key loops count one block.
Elementwise work is left out (matmuls are what the bf16 peak measures).
"""

from __future__ import annotations

import math
from typing import Any

from jax.extend import core as jex_core


def _dot_flops(eqn) -> float:
    lhs, rhs = (v.aval for v in eqn.invars[:2])
    (lc, rc), (lb, rb) = eqn.params["dimension_numbers"]
    contract = math.prod(lhs.shape[d] for d in lc)
    batch = math.prod(lhs.shape[d] for d in lb)
    lhs_free = math.prod(n for d, n in enumerate(lhs.shape) if d not in lc and d not in lb)
    rhs_free = math.prod(n for d, n in enumerate(rhs.shape) if d not in rc and d not in rb)
    return 2.0 * batch * lhs_free * rhs_free * contract


def _attention_flops(eqn) -> float:
    """cuDNN's fused attention (BTNH layout): q [B, T, N, H], k [B, S, K, H]; forward QK^T and PV, backward five
    such products; a causal mask halves them."""
    q, k = (v.aval for v in eqn.invars[:2])
    b, t, n, h = q.shape
    s = k.shape[1]
    per_product = 2.0 * b * n * t * s * h
    products = 5 if "bwd" in eqn.primitive.name else 2
    causal = "CAUSAL" in str(eqn.params.get("mask_type", ""))
    return products * per_product * (0.5 if causal else 1.0)


def _sub_jaxprs(eqn) -> list:
    out = []
    for value in eqn.params.values():
        for item in value if isinstance(value, (tuple, list)) else (value,):
            if isinstance(item, jex_core.ClosedJaxpr):
                out.append(item.jaxpr)
            elif isinstance(item, jex_core.Jaxpr):
                out.append(item)
    return out


def jaxpr_flops(jaxpr: Any) -> float:
    """Matmul FLOPs of a (closed) jaxpr, recursing into calls, scans (x length), conds (costlier branch)."""
    jaxpr = getattr(jaxpr, "jaxpr", jaxpr)
    total = 0.0
    for eqn in jaxpr.eqns:
        name = eqn.primitive.name
        if name == "dot_general":
            total += _dot_flops(eqn)
        elif "dot_product_attention" in name:
            total += _attention_flops(eqn)
        elif name == "scan":
            total += eqn.params["length"] * jaxpr_flops(eqn.params["jaxpr"])
        elif name == "cond":
            total += max(jaxpr_flops(branch) for branch in eqn.params["branches"])
        else:
            total += sum(jaxpr_flops(sub) for sub in _sub_jaxprs(eqn))
    return total


def program_flops(traced) -> float:
    """Matmul FLOPs of one call of a traced program (`Program.trace()`), the whole (global) computation."""
    return jaxpr_flops(traced.jaxpr)


