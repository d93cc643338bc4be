"""Causal grouped-query attention that never holds the [T, S] scores: blockwise over keys with an online
softmax and a flash-attention backward that recomputes each block (plain JAX, so it runs on the CPU), cuDNN's
fused kernel on NVIDIA GPUs where it applies, and the dense form for one-token decode steps over a short window
(over a long one the model reads each row's own cache length instead: `decode_attention.py`).

Which keys query t of row b sees: cache slot s with s <= offset[b] + t and key_valid[b, s]. Without a cache
offset is 0 and key_valid is the [B, T] attention mask; with one, offset is cache_index [B] and key_valid
the optional [B, S] slot mask. Both are O(T); the visibility of a block is an iota comparison inside it.
"""

from __future__ import annotations

import functools
import math
from typing import Any

import chex
import jax
import jax.numpy as jnp
import numpy as np

from ragen_jax.models import target
from ragen_jax.shapes import even_chunk, round_up

# Queries and keys per block (a score block is [G*BLOCK_Q, BLOCK_K] per row and key head). Smaller blocks skip more
# of the causal mask but run more, smaller kernels; larger ones fall out of cache. On a 2-core CPU 256 x 256 was the
# fastest of the square and mixed sizes tried for forward+backward at 4 x 3584 (`experiments/bench/bench_attention.py
# --backward --batch 4 --length 3584` with these constants changed); bigger blocks keep both threads busy.
BLOCK_Q = 256
BLOCK_K = 256
# Keys per block when a prefill reads a cache window of at most BLOCK_K slots. Such a window is one block, which
# the causal skip cannot drop, so every query scored every slot of it, even those past the prompt's end; in
# 64-slot blocks the skip drops them (smaller blocks add more loop steps than they skip). Longer windows keep
# BLOCK_K, where 64-slot blocks' many small kernels cost more than the skip saves (the tiny case of
# `experiments/bench/bench_generate.py`, whose prefill writes such a window).
CACHE_WINDOW_BLOCK_K = 64
_NEG = float(np.finfo(np.float32).min)  # score of a key the query may not see
_M0 = _NEG / 2  # running max before any visible key: exp((_NEG - _M0) * scale) is exactly 0
IMPLEMENTATIONS = ("dense", "blockwise", "cudnn")


def choose_implementation(*, platform: str, dtype: Any, head_dim: int, q_len: int, from_cache: bool,
                          compute_capability: str | None = None) -> str:
    """Which attention applies: 'dense' for one query (decode), 'cudnn' on CUDA GPUs (sm80+) for bf16/fp16
    without a cache offset and a head_dim cuDNN takes, 'blockwise' everywhere else (the CPU never gets cudnn)."""
    if q_len == 1:
        return "dense"
    if platform != "gpu" or compute_capability is None or from_cache:
        return "blockwise"
    capability = tuple(int(x) for x in compute_capability.split("."))
    head_max = 256 if capability >= (9, 0) else 128
    if (capability >= (8, 0) and jnp.dtype(dtype) in (jnp.dtype(jnp.bfloat16), jnp.dtype(jnp.float16))
            and head_dim % 8 == 0 and head_dim <= head_max):
        return "cudnn"
    return "blockwise"


def _device_facts() -> tuple[str, str | None]:
    """(platform of the default device, its CUDA compute capability or None): `target.device_facts`."""
    return target.device_facts()


def dense_attention(q, k, v, offset=None, key_valid=None, cache_layout: bool = False,
                    query_positions=None) -> jax.Array:
    """Reference form: q [B, T, H, hd], k/v [B, S, K, hd] (cache_layout: k [B, K, hd, S], v [B, K, S, hd]) ->
    [B, T, H, hd] through the full [B, K, G, T, S] scores (float32) and a [B, T, S] mask. Used for decode steps
    (T = 1) and as the tests' reference. query_positions [B, T] (instead of offset): query t of row b sits at
    slot query_positions[b, t]. Values of slots no query sees are zeroed (a stale NaN stays out of the output);
    their keys are not (one select per step less), so a gradient through them is not guarded."""
    b, t, h, hd = q.shape
    kh, s = _heads_and_slots(k, cache_layout)
    ks, vs = _key_value_layouts(cache_layout)
    query_positions = _query_positions(b, t, offset, query_positions)
    mask = jnp.arange(s)[None, None, :] <= query_positions[:, :, None]
    if key_valid is not None:
        mask = mask & key_valid.astype(bool)[:, None, :]
    qg = q.reshape(b, t, kh, h // kh, hd).transpose(0, 2, 3, 1, 4)  # batch axes first: XLA:CPU then takes bf16
    scores = jnp.einsum(f"bkgtd,{ks}->bkgts", qg, k, preferred_element_type=jnp.float32)
    scores = scores * (1.0 / math.sqrt(hd))
    scores = jnp.where(mask[:, None, None, :, :], scores, _NEG)
    probs = jax.nn.softmax(scores, axis=-1).astype(v.dtype)
    v = zero_unseen(v, jnp.any(mask, axis=1), vs)
    return jnp.einsum(f"bkgts,{vs}->btkgd", probs, v).reshape(b, t, h, hd)


def zero_unseen(x: jax.Array, seen: jax.Array, layout: str) -> jax.Array:
    """Keys or values x in einsum layout `layout` ("bkds", "bksd" or "bskd") with the slots no query sees (seen
    [B, S] False) set to 0. A masked slot weighs exactly 0, but 0 * NaN and 0 * inf are NaN: a non-finite slot of a
    reused cache (past a row's length) must leave the products, not only the softmax."""
    shape = [seen.shape[0], 1, 1, 1]
    shape[layout.index("s")] = seen.shape[1]
    return jnp.where(seen.reshape(shape), x, jnp.zeros((), x.dtype))


def _heads_and_slots(k: jax.Array, cache_layout: bool) -> tuple[int, int]:
    """(key heads K, key slots S) of keys [B, S, K, hd], or [B, K, hd, S] in the cache's layout."""
    return (k.shape[1], k.shape[3]) if cache_layout else (k.shape[2], k.shape[1])


def _key_value_layouts(cache_layout: bool) -> tuple[str, str]:
    """einsum axes of (keys, values): the cache's ("bkds", "bksd"), else both "bskd"."""
    return ("bkds", "bksd") if cache_layout else ("bskd", "bskd")


def _query_positions(b: int, t: int, offset, query_positions) -> jax.Array:
    """[B, T] int32 slot of each query: query_positions, or offset[b] + t (offset None = 0)."""
    if query_positions is not None:
        if offset is not None:
            raise ValueError("Pass offset or query_positions, not both.")
        return query_positions.astype(jnp.int32)
    offset = jnp.zeros((b,), jnp.int32) if offset is None else offset.astype(jnp.int32)
    return offset[:, None] + jnp.arange(t, dtype=jnp.int32)[None, :]


# ----------------------------------------------------------------------------------------- blocked layout
def block_length(n: int, block: int) -> int:
    """Positions per block for a sequence of n: as few blocks as `block` allows, evened (`shapes.even_chunk`, a
    multiple of 16; a single block a multiple of 8). A 384-token row is 2 x 192, not 2 x 256: the trainer's length
    buckets above 256 are multiples of 128, and 256-blocks would pad 384 to 512, scoring 16/9 of the causal
    blocks' area (`experiments/bench/bench_train.py --sizes tiny-384`)."""
    return even_chunk(n, block, 8 if n <= block else 16)


def _position_blocks(positions: jax.Array, groups: int, bq: int) -> jax.Array:
    """Query slots [B, T] -> [nq, B, G*bq] in _to_query_blocks' row order (group, query); padding -1."""
    b, t = positions.shape
    tp = round_up(t, bq)
    pos = jnp.pad(positions, ((0, 0), (0, tp - t)), constant_values=-1).reshape(b, tp // bq, bq).transpose(1, 0, 2)
    return jnp.tile(pos, (1, 1, groups))


def _block_bounds(qpos: jax.Array) -> tuple[jax.Array, jax.Array]:
    """Per query block, over rows: the latest slot [nq] and the earliest real one [nq] (padding excluded)."""
    real = jnp.where(qpos >= 0, qpos, jnp.iinfo(jnp.int32).max)
    return jnp.max(qpos, axis=(1, 2)), jnp.min(real, axis=(1, 2))


def _to_query_blocks(q: jax.Array, kv_heads: int, bq: int) -> jax.Array:
    """[B, T, H, hd] -> [nq, B, K, G*bq, hd] (T padded to whole blocks; a row is (group, query))."""
    b, t, h, hd = q.shape
    tp = round_up(t, bq)
    q = jnp.pad(q, ((0, 0), (0, tp - t), (0, 0), (0, 0)))
    q = q.reshape(b, tp // bq, bq, kv_heads, h // kv_heads, hd).transpose(1, 0, 3, 4, 2, 5)
    return q.reshape(tp // bq, b, kv_heads, h // kv_heads * bq, hd)


def _from_query_blocks(x: jax.Array, t: int, heads: int) -> jax.Array:
    """Inverse of _to_query_blocks: [nq, B, K, G*bq, hd] -> [B, T, H, hd]."""
    nq, b, kh, gq, hd = x.shape
    bq = gq // (heads // kh)
    x = x.reshape(nq, b, kh, heads // kh, bq, hd).transpose(1, 0, 4, 2, 3, 5)
    return x.reshape(b, nq * bq, heads, hd)[:, :t]


def _to_key_blocks(k: jax.Array, bk: int, layout: str = "bskd") -> jax.Array:
    """k laid out [B, S, K, hd] ("bskd"), [B, K, S, hd] ("bksd", the cache's values) or [B, K, hd, S] ("bkds",
    the cache's keys) -> [nk, B, K, bk, hd] (S padded to whole blocks)."""
    if layout == "bkds":
        b, kh, hd, s = k.shape
        sp = round_up(s, bk)
        k = jnp.pad(k, ((0, 0), (0, 0), (0, 0), (0, sp - s)))
        return k.reshape(b, kh, hd, sp // bk, bk).transpose(3, 0, 1, 4, 2)
    if layout == "bksd":
        b, kh, s, hd = k.shape
        sp = round_up(s, bk)
        k = jnp.pad(k, ((0, 0), (0, 0), (0, sp - s), (0, 0)))
        return k.reshape(b, kh, sp // bk, bk, hd).transpose(2, 0, 1, 3, 4)
    b, s, kh, hd = k.shape
    sp = round_up(s, bk)
    k = jnp.pad(k, ((0, 0), (0, sp - s), (0, 0), (0, 0)))
    return k.reshape(b, sp // bk, bk, kh, hd).transpose(1, 0, 3, 2, 4)


def _valid_blocks(key_valid: jax.Array | None, b: int, s: int, bk: int) -> tuple[jax.Array, jax.Array]:
    """([nk, B, bk] bool: real (and, where given, unmasked) key slots, the padding to whole blocks False; [nk] bool:
    key block j has no invalid slot). Without a mask the blocks that are whole are known while tracing: computing
    them in the program made XLA constant-fold a reduction over the whole key range in every layer, one of a
    program's slowest compile steps (XLA's slow-operation alarm named it)."""
    sp = round_up(s, bk)
    if key_valid is None:
        valid = np.arange(sp) < s
        return jnp.asarray(np.broadcast_to(valid.reshape(1, sp // bk, bk), (b, sp // bk, bk)).transpose(1, 0, 2)), \
            jnp.asarray(valid.reshape(sp // bk, bk).all(axis=1))
    valid = jnp.pad(key_valid.astype(bool), ((0, 0), (0, sp - s))).reshape(b, sp // bk, bk).transpose(1, 0, 2)
    return valid, jnp.all(valid, axis=(1, 2))


def _scores(qi, kj, qpos, key_start, valid_j, unmasked, keys_major: bool = False) -> jax.Array:
    """Unscaled float32 scores [B, K, G*bq, bk] of queries at slots qpos [B, G*bq] against key slots key_start + c
    (keys_major: [B, K, bk, G*bq]), invisible keys at _NEG; `unmasked` (scalar bool: every key visible to every
    query) skips the masking."""
    if keys_major:
        s = jnp.einsum("bksd,bkqd->bksq", kj, qi, preferred_element_type=jnp.float32)
    else:
        s = jnp.einsum("bkqd,bksd->bkqs", qi, kj, preferred_element_type=jnp.float32)

    def masked(s):
        slots = key_start + jnp.arange(valid_j.shape[-1], dtype=jnp.int32)  # [bk]
        if keys_major:
            vis = (slots[None, :, None] <= qpos[:, None, :]) & valid_j[:, :, None]  # [B, bk, G*bq]
        else:
            vis = (slots[None, None, :] <= qpos[:, :, None]) & valid_j[:, None, :]  # [B, G*bq, bk]
        return jnp.where(vis[:, None], s, _NEG)

    return jax.lax.cond(unmasked, lambda s: s, masked, s)


def _unmasked(qmin_i, key_start, bk: int, full_j) -> jax.Array:
    """Whether the query block's earliest query (hence every one) sees key block's last key in every row."""
    return (key_start + bk - 1 <= qmin_i) & full_j


# -------------------------------------------------------------------------------- flash forward/backward
def _flash_forward(qb, kb, vb, qpos, valid, full, q_blocks, scale: float, bq: int):
    """(out [nq, B, K, G*bq, hd] in q's dtype, logsumexp [nq, B, K, G*bq] f32); visits only the key blocks
    up to the latest query position of each query block (over rows), and no key block for the query blocks from
    `q_blocks` on (all padding: their output is 0). qpos [nq, B, G*bq] int32: each query's slot (-1: padding);
    valid, full: `_valid_blocks`."""
    nq, b, kh, gq, hd = qb.shape
    nk, bk = kb.shape[0], kb.shape[3]
    qmax, qmin = _block_bounds(qpos)
    vb = jnp.concatenate([vb, jnp.ones(vb.shape[:-1] + (1,), vb.dtype)], axis=-1)  # the last column sums P

    def query_block(_, xs):
        i, qi, qp, qmax_i, qmin_i = xs
        n_keys = jnp.where(i < q_blocks, jnp.minimum(nk, qmax_i // bk + 1), 0)

        def key_block(j, carry):
            m, acc = carry
            s = _scores(qi, kb[j], qp, j * bk, valid[j], _unmasked(qmin_i, j * bk, bk, full[j]))
            m_new = jnp.maximum(m, jnp.max(s, axis=-1))
            p = jnp.exp((s - m_new[..., None]) * scale)
            alpha = jnp.exp((m - m_new) * scale)
            pv = jnp.einsum("bkqs,bksd->bkqd", p.astype(vb.dtype), vb[j], preferred_element_type=jnp.float32)
            return m_new, alpha[..., None] * acc + pv

        init = (jnp.full((b, kh, gq), _M0, jnp.float32), jnp.zeros((b, kh, gq, hd + 1), jnp.float32))
        m, acc = jax.lax.fori_loop(0, n_keys, key_block, init)
        acc, l = acc[..., :hd], acc[..., hd]
        seen = l > 0  # a query that sees no key (left padding) gets 0, not NaN
        safe = jnp.where(seen, l, 1.0)
        out = (acc / safe[..., None]).astype(qb.dtype)
        return None, (out, jnp.where(seen, m * scale + jnp.log(safe), 0.0))

    _, (out, lse) = jax.lax.scan(query_block, None, (jnp.arange(nq, dtype=jnp.int32), qb, qpos, qmax, qmin))
    return out, lse


@functools.partial(jax.custom_vjp, nondiff_argnums=(7, 8))
def _flash(qb, kb, vb, qpos, valid, full, q_blocks, scale: float, bq: int):
    return _flash_forward(qb, kb, vb, qpos, valid, full, q_blocks, scale, bq)[0]


def _flash_fwd(qb, kb, vb, qpos, valid, full, q_blocks, scale, bq):
    out, lse = _flash_forward(qb, kb, vb, qpos, valid, full, q_blocks, scale, bq)
    return out, (qb, kb, vb, qpos, valid, full, q_blocks, out, lse)


def _flash_bwd(scale, bq, residuals, d_out):
    """dQ, dK, dV by recomputing each visible block's probabilities from the saved logsumexp (FlashAttention-2:
    dS = P * (dP - rowsum(dO * O))); key heads accumulate over the query heads of their group. Blocks are held
    keys-major ([.., bk, G*bq]) and dQ transposed ([.., hd, G*bq]), so every product contracts a minor axis of
    one operand (XLA:CPU hands those to its GEMM library; the query-major form left dK and dV to its own dot)."""
    qb, kb, vb, qpos, valid, full, q_blocks, out, lse = residuals
    nq, b, kh, gq, hd = qb.shape
    nk, bk = kb.shape[0], kb.shape[3]
    qmax, qmin = _block_bounds(qpos)
    delta = jnp.sum(d_out.astype(jnp.float32) * out.astype(jnp.float32), axis=-1)  # [nq, B, K, G*bq]

    def key_block(dq_t, xs):
        j, kj, vj, valid_j, full_j = xs
        kj_t = jnp.swapaxes(kj, -1, -2).astype(jnp.float32)  # [B, K, hd, bk], once per key block
        sees = qmax >= j * bk  # [nq]: some query of block i may see key block j; none before the first does
        first = jnp.where(jnp.any(sees), jnp.argmax(sees), nq).astype(jnp.int32)

        def query_block(i, carry):
            dq_t, dk, dv = carry
            qi, doi = qb[i], d_out[i]
            unmasked = _unmasked(qmin[i], j * bk, bk, full_j)
            s_t = _scores(qi, kj, qpos[i], j * bk, valid_j, unmasked, keys_major=True)
            p_t = jnp.exp(s_t * scale - lse[i][:, :, None, :])  # [B, K, bk, G*bq]
            dv = dv + jnp.einsum("bksq,bkqd->bksd", p_t.astype(doi.dtype), doi, preferred_element_type=jnp.float32)
            dp_t = jnp.einsum("bksd,bkqd->bksq", vj, doi, preferred_element_type=jnp.float32)
            ds_t = p_t * (dp_t - delta[i][:, :, None, :])  # float32: rounding dS to bf16 would double dQ's error
            dq_i = jnp.einsum("bkds,bksq->bkdq", kj_t, ds_t)
            dq_t = jax.lax.dynamic_update_index_in_dim(dq_t, dq_t[i] + dq_i * scale, i, 0)
            dk = dk + jnp.einsum("bksq,bkqd->bksd", ds_t, qi.astype(jnp.float32))
            return dq_t, dk, dv

        zeros = jnp.zeros((b, kh, bk, hd), jnp.float32)
        dq_t, dk, dv = jax.lax.fori_loop(first, jnp.minimum(nq, q_blocks), query_block, (dq_t, zeros, zeros))
        return dq_t, (dk * scale, dv)

    xs = (jnp.arange(nk, dtype=jnp.int32), kb, vb, valid, full)
    dq_t, (dk, dv) = jax.lax.scan(key_block, jnp.zeros((nq, b, kh, hd, gq), jnp.float32), xs)
    dq = jnp.swapaxes(dq_t, -1, -2)
    return dq.astype(qb.dtype), dk.astype(kb.dtype), dv.astype(vb.dtype), None, None, None, None


_flash.defvjp(_flash_fwd, _flash_bwd)


def blockwise_attention(q, k, v, offset=None, key_valid=None, query_lengths=None, *, query_positions=None,
                        block_q: int | None = None, block_k: int | None = None,
                        cache_layout: bool = False) -> jax.Array:
    """q [B, T, H, hd], k/v [B, S, K, hd] (cache_layout: k [B, K, hd, S], v [B, K, S, hd]) -> [B, T, H, hd] in q's
    dtype, holding one score block of at most [G*block_q, block_k] per (row, key head) at a time (default BLOCK_Q
    and `key_block_length`'s; evened over the sequence by `block_length`). Gradients recompute blocks (custom
    VJP). query_lengths [B] (optional): queries t >= query_lengths[b] are padding, whole blocks of them are
    skipped. query_positions [B, T] (instead of offset): query t of row b sits at that slot (best sorted along T:
    key blocks are skipped by each query block's latest position). Reading a cache (cache_layout or offset), keys
    and values of slots no query sees are zeroed, so a stale NaN reaches neither the output nor a gradient."""
    b, t, h, hd = q.shape
    kh, s = _heads_and_slots(k, cache_layout)
    bq, bk = block_length(t, block_q or BLOCK_Q), key_block_length(s, block_k, cache_layout)
    positions = _query_positions(b, t, offset, query_positions)
    qpos = _position_blocks(positions, h // kh, bq)
    nq = round_up(t, bq) // bq
    q_blocks = nq if query_lengths is None else (jnp.max(query_lengths).astype(jnp.int32) + bq - 1) // bq
    k_layout, v_layout = _key_value_layouts(cache_layout)
    if cache_layout or offset is not None:  # a cache: slots past a row's queries may hold garbage, even NaN
        seen = jnp.arange(s, dtype=jnp.int32)[None, :] <= jnp.max(positions, axis=1)[:, None]  # [B, S]
        seen = seen if key_valid is None else seen & key_valid.astype(bool)
        k, v = zero_unseen(k, seen, k_layout), zero_unseen(v, seen, v_layout)  # fused into the blocks' copies
    out = _flash(_to_query_blocks(q, kh, bq), _to_key_blocks(k, bk, k_layout), _to_key_blocks(v, bk, v_layout),
                 qpos, *_valid_blocks(key_valid, b, s, bk), jnp.asarray(q_blocks, jnp.int32), 1.0 / math.sqrt(hd), bq)
    return _from_query_blocks(out, t, h)


def key_block_length(s: int, block_k: int | None = None, cache_layout: bool = False) -> int:
    """Keys per block over s key slots: `block_length(s, block_k)`; by default BLOCK_K, or CACHE_WINDOW_BLOCK_K
    for a cache window (cache_layout) of at most BLOCK_K slots."""
    if block_k is None:
        block_k = CACHE_WINDOW_BLOCK_K if cache_layout and s <= BLOCK_K else BLOCK_K
    return block_length(s, block_k)


def right_padding(key_valid: jax.Array) -> tuple[jax.Array, jax.Array]:
    """key_valid [B, S] bool -> (lengths [B] int32, whether every row is a prefix of valid keys: scalar bool)."""
    valid = key_valid.astype(bool)
    lengths = jnp.sum(valid, axis=1, dtype=jnp.int32)
    return lengths, jnp.all(valid == (jnp.arange(valid.shape[1])[None, :] < lengths[:, None]))


def _cudnn_attention(q, k, v, key_valid) -> jax.Array:
    """cuDNN's fused causal attention; right-padded rows by their lengths, any other mask through blockwise."""
    if key_valid is None:
        return jax.nn.dot_product_attention(q, k, v, is_causal=True, implementation="cudnn")
    lengths, right_padded = right_padding(key_valid)

    def fused(q, k, v):  # an all-padding row attends to slot 0 rather than to nothing
        return jax.nn.dot_product_attention(q, k, v, is_causal=True, key_value_seq_lengths=jnp.maximum(lengths, 1),
                                            implementation="cudnn")

    return jax.lax.cond(right_padded, fused, lambda q, k, v: blockwise_attention(q, k, v, None, key_valid), q, k, v)


def attention(q, k, v, *, offset=None, key_valid=None, query_lengths=None, query_positions=None,
              implementation: str | None = None, cache_layout: bool = False) -> jax.Array:
    """Causal GQA: q [B, T, H, hd], k/v [B, S, K, hd] (cache_layout: the KV cache's, k [B, K, hd, S] and
    v [B, K, S, hd]) -> [B, T, H, hd]; query t of row b sees slots s <= offset[b] + t (offset [B] int32, None = 0)
    with key_valid[b, s] ([B, S] bool, None = all).
    query_positions [B, T] int32 (instead of offset): query t of row b sits at slot query_positions[b, t] and sees
    s <= that (queries picked out of a longer sequence, best sorted along T).
    query_lengths [B] int32 (optional): queries t >= query_lengths[b] are padding whose output is unspecified
    (blockwise skips whole blocks of them). implementation: one of IMPLEMENTATIONS, or None to pick with
    `choose_implementation`."""
    chex.assert_rank([q, k, v], 4)
    b, t, h, hd = q.shape
    kh, s = _heads_and_slots(k, cache_layout)
    want_k, want_v = ((b, kh, hd, s), (b, kh, s, hd)) if cache_layout else ((b, s, kh, hd), (b, s, kh, hd))
    if h % kh or k.shape != want_k or v.shape != want_v:
        layout = "k [B, K, hd, S] and v [B, K, S, hd]" if cache_layout else "k/v [B, S, K, hd]"
        raise ValueError(f"q {q.shape}, k {k.shape} and v {v.shape} must be [B, T, H, hd] and {layout} with K "
                         "dividing H.")
    if offset is not None:
        chex.assert_shape(offset, (b,))
    if key_valid is not None:
        chex.assert_shape(key_valid, (b, s))
    if query_lengths is not None:
        chex.assert_shape(query_lengths, (b,))
    if query_positions is not None:
        chex.assert_shape(query_positions, (b, t))
        if offset is not None:
            raise ValueError("Pass offset or query_positions, not both.")
        if t == 1:  # one query per row: a decode-shaped step at its own offset
            offset, query_positions = query_positions[:, 0].astype(jnp.int32), None
    if implementation is None:
        platform, capability = _device_facts()
        implementation = choose_implementation(platform=platform, dtype=q.dtype, head_dim=hd, q_len=t,
                                               from_cache=offset is not None or query_positions is not None,
                                               compute_capability=capability)
    if implementation == "dense":
        return dense_attention(q, k, v, offset, key_valid, cache_layout, query_positions)
    if implementation == "blockwise":
        return blockwise_attention(q, k, v, offset, key_valid, query_lengths, query_positions=query_positions,
                                   cache_layout=cache_layout)
    if implementation == "cudnn":
        if offset is not None or cache_layout or query_positions is not None:
            raise ValueError("implementation='cudnn' covers attention without a cache; use 'blockwise'.")
        return _cudnn_attention(q, k, v, key_valid)
    raise ValueError(f"implementation must be one of {IMPLEMENTATIONS} or None, got {implementation!r}.")
