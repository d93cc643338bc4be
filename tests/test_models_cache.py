"""KV-cache semantics of the contract: per-row cache_index, contiguous rows, functional update."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from model_fixtures import CFG, call_model
from ragen_jax.models import CausalLM, init_cache


@pytest.fixture(scope="module")
def model():
    return CausalLM(CFG, rngs=nnx.Rngs(0))


@pytest.mark.slow  # default run: too long for CI's 15 minutes on 2 cores
def test_two_chunk_prefill_with_per_row_index_equals_full_forward(model):
    rng = np.random.RandomState(0)
    lengths = np.array([14, 9, 5])
    first = np.array([6, 2, 5])  # row b's first chunk length
    t = lengths.max()
    seqs = rng.randint(0, 256, (3, t))
    full, _ = call_model(model, seqs, np.broadcast_to(np.arange(t), (3, t)))

    def chunk(starts, sizes, width):
        toks = np.full((3, width), 7)  # filler beyond each row's chunk: garbage the cache must never read
        for b in range(3):
            toks[b, : sizes[b]] = seqs[b, starts[b]: starts[b] + sizes[b]]
        return toks, starts[:, None] + np.arange(width)[None]

    cache = init_cache(CFG, 3, 32)
    toks1, pos1 = chunk(np.zeros(3, int), first, first.max())
    logits1, cache = call_model(model, toks1, pos1, cache=cache, cache_index=jnp.zeros(3, jnp.int32))
    toks2, pos2 = chunk(first, lengths - first, (lengths - first).max())
    logits2, cache = call_model(model, toks2, pos2, cache=cache, cache_index=jnp.asarray(first, jnp.int32))
    assert [k.shape for k in cache.k] == [(3, 2, 16, 32)] * 2  # per layer [B, K, hd, S]
    assert [v.shape for v in cache.v] == [(3, 2, 32, 16)] * 2  # per layer [B, K, S, hd]
    assert cache.max_len == 32 and cache.batch_size == 3
    for b in range(3):
        got = np.concatenate([logits1[b, : first[b]], logits2[b, : lengths[b] - first[b]]])
        np.testing.assert_allclose(got, full[b, : lengths[b]], atol=1e-5, rtol=0)


def test_cache_update_is_functional_and_donatable(model):
    graphdef, state = nnx.split(model)
    cache = init_cache(CFG, 2, 8)
    step = jax.jit(lambda s, c, t, p, i: nnx.merge(graphdef, s)(t, p, cache=c, cache_index=i), donate_argnums=1)
    tokens = jnp.array([[3, 4], [5, 6]], jnp.int32)
    _, new = jax.jit(lambda s, c: nnx.merge(graphdef, s)(tokens, tokens, cache=c, cache_index=jnp.array([0, 3])))(
        state, cache)
    assert sum(float(jnp.abs(x).sum()) for x in cache.k + cache.v) == 0.0  # the input cache is untouched
    want = [[1, 1, 0, 0, 0, 0, 0, 0], [0, 0, 0, 1, 1, 0, 0, 0]]
    for k, v in zip(new.k, new.v):
        np.testing.assert_array_equal(np.abs(np.asarray(k)).sum(axis=(1, 2)) > 0, want)  # [B, S] of [B, K, hd, S]
        np.testing.assert_array_equal(np.abs(np.asarray(v)).sum(axis=(1, 3)) > 0, want)  # [B, S] of [B, K, S, hd]
    _, newer = step(state, new, tokens[:, :1], jnp.array([[2], [5]], jnp.int32), jnp.array([2, 5], jnp.int32))
    assert newer.k[0].shape == new.k[0].shape and all(x.is_deleted() for x in new.k + new.v)


def test_cache_slot_mask_supports_left_padded_cache(model):
    tokens = np.array([[0, 0, 0, 11, 12, 13], [21, 22, 23, 24, 25, 26]])
    mask = tokens > 0
    positions = np.maximum(np.cumsum(mask, 1) - 1, 0)
    full, _ = call_model(model, tokens, positions, attention_mask=mask)
    slot_mask = np.concatenate([mask, np.ones((2, 4), bool)], 1)
    cache = init_cache(CFG, 2, 10)
    got, _ = call_model(model, tokens, positions, attention_mask=slot_mask, cache=cache,
                   cache_index=jnp.zeros(2, jnp.int32))
    np.testing.assert_allclose(np.asarray(got)[mask], np.asarray(full)[mask], atol=1e-5, rtol=0)


def test_cache_requires_index():
    m = CausalLM(CFG, rngs=nnx.Rngs(0))
    with pytest.raises(ValueError, match="cache_index"):
        m(jnp.zeros((1, 2), jnp.int32), jnp.zeros((1, 2), jnp.int32), cache=init_cache(CFG, 1, 4))



@pytest.mark.slow  # default run: too long for CI's 15 minutes on 2 cores
def test_a_chunk_longer_than_the_cache_window_is_refused():
    """Every token of a chunk without query_lengths is real, so T > the window (cache.max_len, or kv_len) always
    drops keys past it: those tokens' logits were silently wrong. With query_lengths the tail is padding."""
    m = CausalLM(CFG, rngs=nnx.Rngs(0))
    tokens, positions = jnp.zeros((1, 6), jnp.int32), jnp.arange(6, dtype=jnp.int32)[None]
    start = jnp.zeros((1,), jnp.int32)
    with pytest.raises(ValueError, match="6 tokens.*5 cache slots"):
        m(tokens, positions, cache=init_cache(CFG, 1, 5), cache_index=start)
    with pytest.raises(ValueError, match="6 tokens.*4 cache slots"):
        m(tokens, positions, cache=init_cache(CFG, 1, 8), cache_index=start, kv_len=4)
    logits, _ = m(tokens, positions, cache=init_cache(CFG, 1, 5), cache_index=start,
                  query_lengths=jnp.full((1,), 5, jnp.int32))  # a padded bucket's tail may run past the cache
    full, _ = m(tokens[:, :5], positions[:, :5])
    np.testing.assert_allclose(logits[:, :5], full, atol=1e-5, rtol=0)

def _hidden(model, tokens, positions, **kw):
    graphdef, state = nnx.split(model)
    fn = jax.jit(lambda s, t, p, kw: nnx.merge(graphdef, s).hidden(t, p, **kw))
    return fn(state, jnp.asarray(tokens, jnp.int32), jnp.asarray(positions, jnp.int32), kw)


@pytest.mark.slow  # default run: too long for CI's 15 minutes on 2 cores
@pytest.mark.parametrize("slot_mask", [False, True])
def test_hidden_at_equals_the_full_prefill_at_those_tokens_and_writes_the_same_cache(model, slot_mask):
    """A prefill that keeps one token per row (the sampler's last token) runs the last layer for it alone: the
    same hidden state there, the same cache, from a cache at per-row offsets (ragged decode or slot mask)."""
    rng = np.random.RandomState(1)
    tokens = rng.randint(1, 256, (3, 11))
    start = np.array([0, 4, 9])
    positions = start[:, None] + np.arange(11)[None]
    at = np.array([10, 3, 0])  # a row's last real token (the rest of the bucket is padding)
    kw = dict(cache_index=jnp.asarray(start, jnp.int32))
    if slot_mask:
        kw["attention_mask"] = jnp.asarray(np.arange(24)[None] >= np.array([0, 1, 2])[:, None])
    full, full_cache = _hidden(model, tokens, positions, cache=init_cache(CFG, 3, 24), **kw)
    kept, kept_cache = _hidden(model, tokens, positions, cache=init_cache(CFG, 3, 24),
                               hidden_at=jnp.asarray(at, jnp.int32), **kw)
    assert kept.shape == (3, 1, CFG.hidden_size)
    np.testing.assert_allclose(kept[:, 0], np.asarray(full)[np.arange(3), at], atol=2e-5, rtol=0)
    # another program (the last layer's other queries cut), so XLA may fuse the layers before it otherwise: the
    # same cache up to float32 rounding, not bit for bit
    np.testing.assert_allclose(kept_cache.k, full_cache.k, atol=1e-6, rtol=1e-6)
    np.testing.assert_allclose(kept_cache.v, full_cache.v, atol=1e-6, rtol=1e-6)


def test_hidden_at_without_a_cache_follows_the_attention_mask(model):
    tokens = np.array([[0, 0, 5, 6, 7, 8], [9, 10, 11, 12, 0, 0]])
    mask = tokens > 0
    positions = np.maximum(np.cumsum(mask, 1) - 1, 0)
    at = np.array([5, 3])
    full, _ = _hidden(model, tokens, positions, attention_mask=jnp.asarray(mask))
    kept, none = _hidden(model, tokens, positions, attention_mask=jnp.asarray(mask), hidden_at=jnp.asarray(at))
    assert none is None
    np.testing.assert_allclose(kept[:, 0], np.asarray(full)[np.arange(2), at], atol=2e-5, rtol=0)


def test_hidden_at_skips_the_last_layers_queries_and_mlp(model):
    """The point of hidden_at: with 2 layers, about half of a prefill's work goes (XLA's own FLOP count)."""
    graphdef, state = nnx.split(model)
    tokens = jnp.ones((2, 64), jnp.int32)
    positions = jnp.broadcast_to(jnp.arange(64, dtype=jnp.int32), (2, 64))

    def flops(**kw):
        fn = jax.jit(lambda s: nnx.merge(graphdef, s).hidden(tokens, positions, cache=init_cache(CFG, 2, 64),
                                                             cache_index=jnp.zeros(2, jnp.int32), **kw))
        return fn.lower(state).compile().cost_analysis()["flops"]

    full, kept = flops(), flops(hidden_at=jnp.array([63, 40], jnp.int32))
    assert kept < 0.7 * full, (kept, full)


@pytest.mark.slow  # default run: too long for CI's 15 minutes on 2 cores
@pytest.mark.parametrize("block", [8, 256])
def test_hidden_at_many_positions_gives_the_same_hidden_and_gradients(model, monkeypatch, block):
    """The update's use: the trained positions of padded rows (sorted, repeated at the end as scored_positions
    pads), no cache; the same hidden states there and the same parameter gradients as the full forward, with
    query blocks smaller than the rows (block 8) and one block per row (256)."""
    from ragen_jax.models import attention as attn

    monkeypatch.setattr(attn, "BLOCK_Q", block)
    monkeypatch.setattr(attn, "BLOCK_K", block)
    rng = np.random.RandomState(2)
    tokens = rng.randint(1, 256, (3, 29))
    mask = np.ones((3, 29), bool)
    mask[1, 21:] = False  # right padding
    mask[2, :5] = False  # left padding
    positions = np.maximum(np.cumsum(mask, 1) - 1, 0)
    at = np.array([[3, 4, 9, 10, 11, 27, 28, 28], [12, 13, 14, 20, 20, 20, 20, 20], [5, 6, 7, 8, 17, 18, 19, 26]])
    weights = jnp.asarray(rng.standard_normal((3, 8, CFG.hidden_size)), jnp.float32)
    graphdef, state = nnx.split(model)

    def loss(s, hidden_at):
        m = nnx.merge(graphdef, s)
        h, _ = m.hidden(jnp.asarray(tokens), jnp.asarray(positions), attention_mask=jnp.asarray(mask),
                        hidden_at=hidden_at)
        if hidden_at is None:
            h = jnp.take_along_axis(h, jnp.asarray(at)[..., None], axis=1)
        return jnp.sum(h * weights), h

    (full_loss, full_h), full_g = jax.jit(jax.value_and_grad(lambda s: loss(s, None), has_aux=True))(state)
    (kept_loss, kept_h), kept_g = jax.jit(jax.value_and_grad(lambda s: loss(s, jnp.asarray(at)), has_aux=True))(state)
    np.testing.assert_allclose(kept_h, full_h, atol=2e-5, rtol=0)
    # loss = sum(h * weights): each hidden value may move by the 2e-5 just allowed
    np.testing.assert_allclose(kept_loss, full_loss, rtol=1e-5, atol=2e-5 * float(jnp.abs(weights).sum()))
    for a, b in zip(jax.tree.leaves(full_g), jax.tree.leaves(kept_g)):
        np.testing.assert_allclose(b, a, atol=2e-5, rtol=1e-4)


def _stale(cache, lengths, fill):
    """The cache with every slot at or past lengths[b] [B] set to `fill` (a stale slot: garbage from earlier use)."""
    s = cache.max_len
    past = np.arange(s)[None, :] >= np.asarray(lengths)[:, None]  # [B, S]
    return cache.replace(k=tuple(jnp.where(past[:, None, None, :], fill, k) for k in cache.k),
                         v=tuple(jnp.where(past[:, None, :, None], fill, v) for v in cache.v))


@pytest.mark.slow  # default run: too long for CI's 15 minutes on 2 cores
@pytest.mark.parametrize("step", ["prefill", "prefill_kept", "decode", "decode_slot_mask"])
@pytest.mark.parametrize("implementation", ["blockwise_or_ragged", "dense"])
@pytest.mark.parametrize("kv_len", [None, 32])
def test_non_finite_stale_slots_never_reach_the_output(model, monkeypatch, step, implementation, kv_len):
    """Slots past each row's length may hold garbage (docs/models.md); NaN or inf there (an earlier longer row, a
    poisoned call) must give the same finite output as a clean cache: a masked slot weighs 0, but 0 * NaN = NaN,
    so it has to stay out of the value product too. Every path: a prefill (blockwise on the CPU, or dense), one
    that keeps a token per row (hidden_at), a decode step (ragged on the CPU, or the dense window), and a decode
    step under a slot mask (dense)."""
    from ragen_jax.models import attention as attn
    from ragen_jax.models import transformer

    if implementation == "dense":
        monkeypatch.setattr(transformer, "attention", lambda *a, **k: attn.attention(*a, **{
            **k, "implementation": "dense"}))
        monkeypatch.setattr(transformer, "uses_ragged_decode", lambda devices=1: False)
    rng = np.random.RandomState(3)
    lengths = np.array([10, 3, 17])
    prompt = rng.randint(1, 256, (3, 17))
    _, cache = call_model(model, prompt, np.broadcast_to(np.arange(17), (3, 17)), cache=init_cache(CFG, 3, 40),
                          cache_index=jnp.zeros(3, jnp.int32), query_lengths=jnp.asarray(lengths, jnp.int32))
    t = 1 if step.startswith("decode") else 6
    tokens = rng.randint(1, 256, (3, t))
    kw = dict(cache_index=jnp.asarray(lengths, jnp.int32))
    if step == "prefill_kept":
        kw["hidden_at"] = jnp.asarray([5, 0, 3], jnp.int32)
    if step == "decode_slot_mask":
        kw["attention_mask"] = jnp.asarray(np.arange(40)[None] != np.array([0, 1, 2])[:, None])
    positions = jnp.asarray(lengths[:, None] + np.arange(t)[None], jnp.int32)
    graphdef, state = nnx.split(model)
    run = jax.jit(lambda s, c: nnx.merge(graphdef, s).hidden(jnp.asarray(tokens), positions, cache=c, kv_len=kv_len,
                                                             **kw))
    want, want_cache = run(state, _stale(cache, lengths, 0.0))
    assert np.isfinite(np.asarray(want)).all()
    for bad in (jnp.nan, jnp.inf):
        got, got_cache = run(state, _stale(cache, lengths, bad))
        assert np.isfinite(np.asarray(got)).all(), (step, bad)
        np.testing.assert_allclose(np.asarray(got), np.asarray(want), atol=1e-6, rtol=0)
        for a, b in zip(got_cache.v, want_cache.v):  # what this call wrote is the same too
            for row, end in enumerate(lengths + t):
                np.testing.assert_array_equal(np.asarray(a)[row, :, :end], np.asarray(b)[row, :, :end])


@pytest.mark.slow  # default run: too long for CI's 15 minutes on 2 cores
def test_a_write_past_the_cache_window_raises_outside_jit():
    """cache_index + T > the window (cache.max_len or kv_len) loses the tokens' own keys (a write past the cache is
    dropped, one past kv_len unread): a call with concrete indices names the row and the slots."""
    m = CausalLM(CFG, rngs=nnx.Rngs(0))
    tokens = jnp.ones((2, 3), jnp.int32)

    def call(index, s=8, **kw):
        index = jnp.asarray(index, jnp.int32)
        return m(tokens, index[:, None] + jnp.arange(3)[None], cache=init_cache(CFG, 2, s), cache_index=index, **kw)

    with pytest.raises(ValueError, match=r"Row 1 writes 3 tokens from cache_index 6: slots 6..8 must lie in \[0, 8\)"):
        call([0, 6])
    with pytest.raises(ValueError, match=r"Row 0 .* must lie in \[0, 8\) \(cache.max_len, or kv_len\)"):
        call([6, 0], s=16, kv_len=8)
    with pytest.raises(ValueError, match=r"Row 0 writes 3 tokens from cache_index -1"):
        call([-1, 0])
    logits, _ = call([5, 6], query_lengths=jnp.asarray([3, 2], jnp.int32))  # row 1's third token is padding
    assert np.isfinite(np.asarray(logits)[:, :2]).all()


@pytest.mark.slow  # default run: too long for CI's 15 minutes on 2 cores
@pytest.mark.parametrize("t", [1, 3])
def test_a_traced_write_past_the_cache_window_gives_nan_for_those_tokens_only(model, t):
    """Under jit the indices are unknown to Python: tokens whose slot lies past the window (their keys dropped or
    unread) get NaN outputs instead of silently wrong ones; every other token, the same output as before."""
    graphdef, state = nnx.split(model)
    rng = np.random.RandomState(4)
    tokens = jnp.asarray(rng.randint(1, 256, (3, t)), jnp.int32)
    index = jnp.asarray([2, 8 - t + 1, 8], jnp.int32)  # fits; its last token one past; all past

    @jax.jit
    def run(s, index):
        return nnx.merge(graphdef, s)(tokens, index[:, None] + jnp.arange(t)[None], cache=init_cache(CFG, 3, 8),
                                      cache_index=index)[0]

    logits = np.asarray(run(state, index))
    slot = np.asarray(index)[:, None] + np.arange(t)[None]
    np.testing.assert_array_equal(np.isnan(logits).all(-1), slot >= 8)
    assert np.isfinite(logits[slot < 8]).all()
    alone = np.asarray(run(state, jnp.asarray([2, 2, 2], jnp.int32)))
    np.testing.assert_allclose(logits[0], alone[0], atol=1e-6, rtol=0)
    kept = jax.jit(lambda s, index: nnx.merge(graphdef, s).hidden(  # the sampler's prefill keeps one token per row
        tokens, index[:, None] + jnp.arange(t)[None], cache=init_cache(CFG, 3, 8), cache_index=index,
        hidden_at=jnp.asarray([0, 0, t - 1], jnp.int32))[0])(state, index)
    np.testing.assert_array_equal(np.isnan(np.asarray(kept)).all(-1)[:, 0], [False, t == 1, True])
