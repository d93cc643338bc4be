"""Ragged decode attention: each row reads only its own cache length, and gets what the dense form gives."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from ragen_jax.models import CausalLM, decode_attention, init_cache, transformer
from ragen_jax.models.attention import dense_attention
from ragen_jax.models.decode_attention import ragged_decode_attention, uses_ragged_decode
from ragen_jax.models.tiny import tiny_config


def _cache(b, kv_heads, s, hd, heads, dtype=jnp.float32, seed=0):
    """(q [B, 1, H, hd], keys [B, K, hd, S], values [B, K, S, hd]): a layer of the KV cache, in its layout."""
    rng = np.random.default_rng(seed)
    ck, cv = (jnp.asarray(rng.standard_normal((b, kv_heads, s, hd)), dtype) for _ in range(2))
    q = jnp.asarray(rng.standard_normal((b, 1, heads, hd)), dtype)
    return q, jnp.swapaxes(ck, 2, 3), cv


def _dense(q, ck, cv, lengths):
    return dense_attention(q, ck, cv, offset=lengths - 1, cache_layout=True)


@pytest.mark.parametrize("heads,kv_heads", [(4, 2), (3, 3)])
@pytest.mark.parametrize("s,block,items", [pytest.param(600, 256, 16, marks=pytest.mark.slow),  # (97, 32, 4) covers
                                           (600, 64, 3), (97, 32, 4), (97, 128, 4), (64, 64, 2)])
def test_matches_dense_for_every_length(heads, kv_heads, s, block, items):
    """Lengths of 1, at and around block edges and the whole cache; S not a multiple of the block; a cache of one
    block or less (read whole, without the item list); GQA and MHA."""
    edges = [1, 2, block - 1, block, block + 1, 2 * block, s - 1, s]
    lengths = jnp.asarray([n for n in edges if n <= s] + [s // 3, s // 2], jnp.int32)
    q, ck, cv = _cache(len(lengths), kv_heads, s, 16, heads)
    fn = jax.jit(lambda q, ck, cv, n: ragged_decode_attention(q, ck, cv, n, block=block, items=items))
    np.testing.assert_allclose(np.asarray(fn(q, ck, cv, lengths)), np.asarray(_dense(q, ck, cv, lengths)),
                               atol=2e-6, rtol=1e-5)


@pytest.mark.slow  # default run: too long for CI's 15 minutes on 2 cores
@pytest.mark.parametrize("block", [64, 512])  # several blocks per row; the whole cache as one block
def test_reads_nothing_past_a_rows_length(block):
    """Slots at and past lengths[b] (here NaN) never reach the output."""
    q, ck, cv = _cache(3, 2, 300, 8, 4)
    lengths = jnp.asarray([5, 256, 299], jnp.int32)
    want = np.asarray(_dense(q, ck, cv, lengths))
    poison = jnp.arange(300)[None, None, :, None] >= lengths[:, None, None, None]  # [B, 1, S, 1]
    for bad in (jnp.nan, jnp.inf, -jnp.inf):
        bad_k, bad_v = jnp.where(jnp.swapaxes(poison, 2, 3), bad, ck), jnp.where(poison, bad, cv)
        for k, v in ((bad_k, bad_v), (ck, bad_v), (bad_k, cv)):  # values poisoned alone take the masked product
            out = jax.jit(lambda q, k, v: ragged_decode_attention(q, k, v, lengths, block=block, items=2))(q, k, v)
            assert np.isfinite(np.asarray(out)).all()
            np.testing.assert_allclose(np.asarray(out), want, atol=2e-6)


@pytest.mark.slow  # default run: too long for CI's 15 minutes on 2 cores
def test_a_row_gets_the_same_bits_whatever_the_batch():
    """The continuous engine's promise: a row's attention does not depend on the rows beside it."""
    q, ck, cv = _cache(6, 2, 700, 16, 4, seed=3)
    lengths = jnp.asarray([700, 3, 512, 256, 90, 431], jnp.int32)
    fn = jax.jit(lambda q, ck, cv, n: ragged_decode_attention(q, ck, cv, n))
    full = np.asarray(fn(q, ck, cv, lengths))
    for rows in ([2], [5, 0], [4, 3, 1]):
        idx = jnp.asarray(rows)
        part = np.asarray(fn(q[idx], ck[idx], cv[idx], lengths[idx]))
        np.testing.assert_array_equal(part, full[rows])


@pytest.mark.slow  # default run: too long for CI's 15 minutes on 2 cores
def test_bfloat16_cache_is_as_accurate_as_dense():
    q, ck, cv = _cache(4, 2, 520, 32, 4, dtype=jnp.bfloat16, seed=5)
    lengths = jnp.asarray([520, 17, 300, 257], jnp.int32)
    exact = _dense(q.astype(jnp.float32), ck.astype(jnp.float32), cv.astype(jnp.float32), lengths)
    ragged = ragged_decode_attention(q, ck, cv, lengths)
    dense = _dense(q, ck, cv, lengths)
    assert ragged.dtype == jnp.bfloat16
    err = lambda x: float(jnp.max(jnp.abs(x.astype(jnp.float32) - exact)))  # noqa: E731
    assert err(ragged) <= 1.5 * err(dense) + 1e-3


def test_bad_shapes_are_named():
    q, ck, cv = _cache(2, 2, 64, 8, 4)
    with pytest.raises(ValueError, match=r"\[B, 1, H, hd\]"):
        ragged_decode_attention(jnp.concatenate([q, q], axis=1), ck, cv, jnp.asarray([3, 4]))
    with pytest.raises(ValueError, match=r"keys .* \[B, K, hd, S\]"):  # keys slots-major: not the cache's layout
        ragged_decode_attention(q, cv, cv, jnp.asarray([3, 4]))


@pytest.mark.slow  # default run: too long for CI's 15 minutes on 2 cores
def test_model_decode_step_uses_it_and_matches_the_window(monkeypatch):
    """A cache step goes ragged on the CPU and gives the windowed dense step's logits and cache."""
    model = CausalLM(tiny_config(), rngs=nnx.Rngs(0))
    rng = np.random.default_rng(1)
    b, s, window = 3, 1024, 512
    prompt = jnp.asarray(rng.integers(1, 100, (b, 40)), jnp.int32)
    lens = jnp.asarray([40, 7, 23], jnp.int32)
    cache = init_cache(model.config, b, s)
    positions = jnp.broadcast_to(jnp.arange(40), (b, 40))
    _, cache = model(prompt, positions, cache=cache, cache_index=jnp.zeros(b, jnp.int32), kv_len=window,
                     query_lengths=lens)
    token = jnp.asarray([[5], [9], [11]], jnp.int32)
    calls = []
    real = transformer.ragged_decode_attention
    monkeypatch.setattr(transformer, "ragged_decode_attention", lambda *a, **k: calls.append(1) or real(*a, **k))
    step = lambda window: model(token, lens[:, None], cache=cache, cache_index=lens, kv_len=window)  # noqa: E731
    ragged_logits, ragged_cache = step(s)
    assert calls, "a decode step on the CPU should read each row's own length"
    monkeypatch.setattr(transformer, "uses_ragged_decode", lambda devices=1: False)
    dense_logits, dense_cache = step(window)
    np.testing.assert_allclose(np.asarray(ragged_logits), np.asarray(dense_logits), atol=1e-5, rtol=1e-5)
    np.testing.assert_array_equal(np.asarray(ragged_cache.k[0]), np.asarray(dense_cache.k[0]))  # before attention
    np.testing.assert_allclose(np.asarray(ragged_cache.v), np.asarray(dense_cache.v), atol=1e-5)


def test_where_it_applies():
    """The CPU on one device; never under several devices (rows shard) or on a GPU."""
    assert uses_ragged_decode() and uses_ragged_decode(devices=1)
    assert not uses_ragged_decode(devices=2)


def test_not_on_a_gpu(monkeypatch):
    monkeypatch.setattr(decode_attention.jax, "default_backend", lambda: "gpu")
    assert not uses_ragged_decode()
