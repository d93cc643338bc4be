"""Decode attention over a ragged KV cache: each row reads only the cache blocks its own length covers.

A decode step has one query per row. The dense form reads a shared window of the cache for every row (the
longest row's length, rounded up), so with rows of different lengths (the continuous rollout engine holds
episodes at different turns) most of what it reads is masked away, and attention over the window is what a
long-context decode step spends. Here the work is a list of (row, key block) items, only the blocks a row
needs, processed P items at a time in a `while_loop` that stops after the last one: each item gathers its
[K, hd, block] keys and [K, block, hd] values straight from the cache (`KVCache`'s layout), scores its row's
query heads against them and keeps the block's max, exp-sum and weighted values; a segment reduction per row
then combines the blocks with the usual softmax rescaling (flash-decoding over a ragged batch). What a row
gets depends only on its own query and cache, not on the other rows or the batch size. A cache of at most one
block is read whole, masked by each row's length: every row's item would be the whole cache, so the list, its
gathers and the segment reduction would only add ops (`experiments/bench/bench_generate.py`, the tiny case).
"""

from __future__ import annotations

import math

import chex
import jax
import jax.numpy as jnp

from ragen_jax.models import target

DECODE_BLOCK = 256  # cache slots per item
DECODE_ITEMS = 16  # items gathered and scored per loop iteration


def uses_ragged_decode(devices: int = 1) -> bool:
    """Whether a decode step reads each row's own cache length instead of a shared window: on the CPU, where
    reading only what each row holds beat the dense window at every shape measured (docs/performance.md,
    "Decode"; `experiments/bench/bench_generate.py`), and on one device (the dense form shards by rows). A GPU keeps the
    dense window, whose few large kernels suit it (not measured there)."""
    return target.backend() == "cpu" and devices == 1


def ragged_decode_attention(q: jax.Array, cache_k: jax.Array, cache_v: jax.Array, lengths: jax.Array, *,
                            block: int = DECODE_BLOCK, items: int = DECODE_ITEMS) -> jax.Array:
    """One query per row against its own first lengths[b] slots of one layer's cache.

    q [B, 1, H, hd]; the layer's keys cache_k [B, K, hd, S] and values cache_v [B, K, S, hd] (`KVCache`'s layout,
    K dividing H); lengths [B] int32 in [1, S] -> [B, 1, H, hd] in q's dtype (scores and softmax in float32)."""
    chex.assert_rank([q, cache_k, cache_v], 4)
    b, t, h, hd = q.shape
    cb, kh, s, chd = cache_v.shape
    if t != 1 or cb != b or chd != hd or h % kh or cache_k.shape != (b, kh, hd, s):
        raise ValueError(f"q {q.shape} must be [B, 1, H, hd], the layer's keys {cache_k.shape} [B, K, hd, S] and "
                         f"its values {cache_v.shape} [B, K, S, hd], with K dividing H.")
    chex.assert_shape(lengths, (b,))
    g, bk = h // kh, min(block, s)
    lengths = jnp.clip(lengths.astype(jnp.int32), 1, s)
    qg = (q.reshape(b, kh, g, hd) * (1.0 / math.sqrt(hd))).astype(jnp.float32)
    if s <= block:  # one block per row: the item list would be every row's whole cache
        return _one_block_attention(qg, cache_k, cache_v, lengths).reshape(b, 1, h, hd).astype(q.dtype)
    blocks = (lengths + bk - 1) // bk  # [B] items per row
    ends = jnp.cumsum(blocks)
    starts, total = ends - blocks, ends[-1]
    n = -(-b * (-(-s // bk)) // items) * items  # static bound on the item count, whole iterations

    def item_rows(idx):
        row = jnp.minimum(jnp.searchsorted(ends, idx, side="right"), b - 1)
        return row, idx - starts[row]

    def gather_keys(row, first):  # [P, K, hd, bk]
        one = lambda r, f: jax.lax.dynamic_slice(cache_k, (r, 0, 0, f), (1, kh, hd, bk))[0]  # noqa: E731
        return jax.vmap(one)(row, first)

    def gather_values(row, first):  # [P, K, bk, hd]
        one = lambda r, f: jax.lax.dynamic_slice(cache_v, (r, 0, f, 0), (1, kh, bk, hd))[0]  # noqa: E731
        return jax.vmap(one)(row, first)

    def body(carry):
        i, m_all, l_all, o_all = carry
        idx = i * items + jnp.arange(items, dtype=jnp.int32)
        row, j = item_rows(idx)
        first = jnp.minimum(j * bk, s - bk)  # the last block of an S that bk does not divide overlaps the one before
        slot = first[:, None] + jnp.arange(bk, dtype=jnp.int32)[None, :]
        valid = (slot >= j[:, None] * bk) & (slot < lengths[row][:, None]) & (idx < total)[:, None]  # [P, bk]
        scores = jnp.einsum("pkgd,pkds->pkgs", qg[row], gather_keys(row, first).astype(jnp.float32))
        scores = jnp.where(valid[:, None, None, :], scores, -jnp.inf)
        m = jnp.max(scores, axis=-1)  # [P, K, G]
        p = jnp.exp(scores - jnp.where(jnp.isfinite(m), m, 0.0)[..., None])
        values = jnp.where(valid[:, None, :, None], gather_values(row, first).astype(jnp.float32), 0.0)
        o = jnp.einsum("pkgs,pksd->pkgd", p, values)  # slots a row may not see never reach it, even as NaN
        at = (i * items, 0, 0)
        return (i + 1, jax.lax.dynamic_update_slice(m_all, m, at),
                jax.lax.dynamic_update_slice(l_all, jnp.sum(p, axis=-1), at),
                jax.lax.dynamic_update_slice(o_all, o, at + (0,)))

    init = (jnp.int32(0), jnp.full((n, kh, g), -jnp.inf, jnp.float32), jnp.zeros((n, kh, g), jnp.float32),
            jnp.zeros((n, kh, g, hd), jnp.float32))
    _, m_all, l_all, o_all = jax.lax.while_loop(lambda c: c[0] * items < total, body, init)
    row_all, _ = item_rows(jnp.arange(n, dtype=jnp.int32))
    m_row = jax.ops.segment_max(m_all, row_all, num_segments=b)  # [B, K, G]
    w = jnp.exp(m_all - m_row[row_all])  # items never written have m = -inf: weight 0
    l_row = jax.ops.segment_sum(l_all * w, row_all, num_segments=b)
    o_row = jax.ops.segment_sum(o_all * w[..., None], row_all, num_segments=b)
    return (o_row / l_row[..., None]).reshape(b, 1, h, hd).astype(q.dtype)


def _one_block_attention(qg: jax.Array, k: jax.Array, v: jax.Array, lengths: jax.Array) -> jax.Array:
    """qg [B, K, G, hd] f32 (scaled) against keys k [B, K, hd, S] and values v [B, K, S, hd], row b's first
    lengths[b] slots -> [B, K, G, hd] f32."""
    scores = jnp.einsum("bkgd,bkds->bkgs", qg, k.astype(jnp.float32))
    valid = (jnp.arange(v.shape[2], dtype=jnp.int32)[None, :] < lengths[:, None])[:, None, None, :]
    scores = jnp.where(valid, scores, -jnp.inf)
    p = jnp.exp(scores - jnp.max(scores, axis=-1, keepdims=True))  # lengths >= 1: every row has a finite max
    total = jnp.sum(p, axis=-1)[..., None]
    weighted = lambda values: jnp.einsum("bkgs,bksd->bkgd", p, values) / total  # noqa: E731
    out = weighted(v.astype(jnp.float32))
    # Stale slots (past a row's length) weigh exactly 0, and 0 * x = 0 for finite x adds nothing to a sum, so the
    # unmasked product is the masked one, bit for bit, unless a stale slot is not finite (0 * NaN and 0 * inf are
    # NaN): only then are the values masked, a pass over them that every step would otherwise pay.
    return jax.lax.cond(jnp.all(jnp.isfinite(out)), lambda: out,
                        lambda: weighted(jnp.where(valid[:, :, 0, :, None], v.astype(jnp.float32), 0.0)))
