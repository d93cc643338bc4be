"""The CPU's measured GEMM rate and a model's matmul FLOPs, for the benchmarks' "fraction of the bound" lines.

The bound is what XLA's own float32 GEMM reaches on this machine (a square n x n x n `jnp.dot`, best of a few
calls): no program made of these matmuls can beat it. A model's FLOPs count its matmuls only (projections, MLP,
the vocabulary projection, and attention's QK^T and AV); norms, RoPE and softmax are ignored, so the fraction
is an upper estimate of how close a step is to the bound.
"""

from __future__ import annotations

import functools
import time

import jax
import jax.numpy as jnp


@functools.lru_cache(maxsize=None)
def gemm_flops_per_s(n: int = 1024, calls: int = 7) -> float:
    """Best float32 GEMM rate (FLOP/s) of XLA on the default device, over `calls` n x n x n products."""
    a = jax.random.normal(jax.random.key(0), (n, n), jnp.float32)
    b = jax.random.normal(jax.random.key(1), (n, n), jnp.float32)
    dot = jax.jit(jnp.dot)
    dot(a, b).block_until_ready()
    best = float("inf")
    for _ in range(calls):
        t0 = time.perf_counter()
        dot(a, b).block_until_ready()
        best = min(best, time.perf_counter() - t0)
    return 2.0 * n**3 / best


def matmul_params(cfg) -> int:
    """Weights a token multiplies through (per-layer projections + MLP, and the vocabulary projection)."""
    h, i = cfg.hidden_size, cfg.intermediate_size
    q, kv = cfg.num_heads * cfg.head_dim, cfg.num_kv_heads * cfg.head_dim
    return cfg.num_layers * (h * q + 2 * h * kv + q * h + 3 * h * i) + cfg.vocab_size * h


def forward_flops(cfg, tokens: int, attended: float) -> float:
    """Forward matmul FLOPs of `tokens` tokens that each attend over `attended` keys on average."""
    attention = 4.0 * cfg.num_layers * cfg.num_heads * cfg.head_dim * attended  # QK^T and AV per token
    return tokens * (2.0 * matmul_params(cfg) + attention)


def bound_line(flops: float, seconds: float) -> str:
    """'X GFLOP/s = Y% of the measured GEMM bound (Z GFLOP/s)'."""
    rate, bound = flops / seconds, gemm_flops_per_s()
    return f"{rate / 1e9:.1f} GFLOP/s = {rate / bound:.1%} of the measured GEMM bound ({bound / 1e9:.1f} GFLOP/s)"
