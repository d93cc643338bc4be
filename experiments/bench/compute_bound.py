"""The CPU's measured GEMM rate and memory read rate, a model's matmul FLOPs and a decode step's bytes, for the
benchmarks' "fraction of the bound" lines.

The compute bound is what XLA's own float32 GEMM reaches on this machine (a square n x n x n `jnp.dot`, best of a
few calls): no program made of these matmuls can beat it. A model's FLOPs count its matmuls only (projections,
MLP, the vocabulary projection where logits are taken, and attention's QK^T and AV); norms, RoPE and softmax are
ignored, so the fraction is an upper estimate of how close a step is to the bound. The memory bound is how fast
XLA streams a large array (a jitted sum): a small-batch decode step reads every weight once, so it cannot beat
(weight + cache bytes) / that rate.
"""

from __future__ import annotations

import functools
import time

import jax
import jax.numpy as jnp

from ragen_jax.models.transformer import projection_params


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


@functools.lru_cache(maxsize=None)
def stream_bytes_per_s(mib: int = 1024, calls: int = 5) -> float:
    """Best rate (bytes/s) at which XLA reads a float32 array of `mib` MiB (a jitted sum, best of `calls`): the
    memory bound of a step that must read every weight once, as a small-batch decode step does."""
    x = jnp.ones((mib * 2**20 // 4,), jnp.float32)
    total = jax.jit(jnp.sum)
    total(x).block_until_ready()
    best = float("inf")
    for _ in range(calls):
        t0 = time.perf_counter()
        total(x).block_until_ready()
        best = min(best, time.perf_counter() - t0)
    return x.nbytes / best


def decode_step_bytes(cfg, batch: int, attended: float, dtype_bytes: int = 4) -> float:
    """Bytes one decode step must read: every weight a token multiplies through once (the vocabulary projection
    included, not the embedding rows it looks up) and each row's `attended` cached keys and values."""
    kv = cfg.num_kv_heads * cfg.head_dim
    tied_head = cfg.vocab_size * cfg.hidden_size if cfg.tie_word_embeddings else 0  # counted there when untied
    weights = projection_params(cfg) + tied_head
    cache = batch * cfg.num_layers * 2 * kv * attended
    return dtype_bytes * (weights + cache)


def layer_flops(cfg, attended: float, queries: bool = True) -> float:
    """Matmul FLOPs of one token through one decoder layer, attending over `attended` keys on average; without
    `queries`, only its key and value projections (a token whose layer output nothing reads)."""
    h, i = cfg.hidden_size, cfg.intermediate_size
    q, kv = cfg.num_heads * cfg.head_dim, cfg.num_kv_heads * cfg.head_dim
    if not queries:
        return 2.0 * 2 * h * kv
    return 2.0 * (h * q + 2 * h * kv + q * h + 3 * h * i) + 4.0 * cfg.num_heads * cfg.head_dim * attended


def forward_flops(cfg, tokens: int, attended: float, logits: bool = True) -> float:
    """Forward matmul FLOPs of `tokens` tokens that each attend over `attended` keys on average, with the
    vocabulary projection at every token unless `logits` is False."""
    head = 2.0 * cfg.vocab_size * cfg.hidden_size if logits else 0.0
    return tokens * (cfg.num_layers * layer_flops(cfg, attended) + head)


def prefill_flops(cfg, batch: int, prompt: int, last_layer_all: bool = True) -> float:
    """Matmul FLOPs of prefilling `batch` prompts of `prompt` tokens and taking the logits of each one's last
    token (what transformers' generate does); with last_layer_all False the last layer attends and runs its MLP
    for the last token only, the others writing just their keys and values (the sampler's prefill)."""
    attended = (prompt + 1) / 2
    flops = forward_flops(cfg, batch * prompt, attended, logits=False) + batch * 2.0 * cfg.vocab_size * cfg.hidden_size
    if not last_layer_all:
        flops -= batch * (prompt - 1) * (layer_flops(cfg, attended) - layer_flops(cfg, attended, queries=False))
    return flops


def bound_line(flops: float, seconds: float) -> str:
    """'X GFLOP/s = Y% of the measured GEMM bound (Z GFLOP/s)'."""
    rate, bound = flops / seconds, gemm_flops_per_s()
    return f"{rate / 1e9:.1f} GFLOP/s = {rate / bound:.1%} of the measured GEMM bound ({bound / 1e9:.1f} GFLOP/s)"
