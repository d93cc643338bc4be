"""Blockwise (flash) attention against the dense reference: outputs and gradients under causal masking, left
and right padding and per-row KV-cache offsets, float32 and bfloat16, lengths that are not whole blocks; the
implementation choice; and the models' forward, gradients and cached prefill with either implementation."""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from ragen_jax.models import CausalLM, init_cache
from ragen_jax.models import attention as attn
from ragen_jax.models import transformer
from ragen_jax.models.tiny import tiny_config
from ragen_jax.models.rope import positions_from_mask


def _inputs(b, t, s, heads, kv_heads, hd=16, dtype=jnp.float32, seed=0):
    rng = np.random.default_rng(seed)
    q = jnp.asarray(rng.standard_normal((b, t, heads, hd)), dtype)
    k = jnp.asarray(rng.standard_normal((b, s, kv_heads, hd)), dtype)
    v = jnp.asarray(rng.standard_normal((b, s, kv_heads, hd)), dtype)
    return q, k, v, rng


def _padding(kind: str, b: int, t: int, s: int, rng):
    """(offset [B] | None, key_valid [B, S] | None) for a masking case."""
    if kind == "causal":
        return None, None
    lengths = rng.integers(max(1, s // 3), s + 1, size=b)
    lengths[0] = s
    if kind == "right":
        return None, jnp.asarray(np.arange(s)[None] < lengths[:, None])
    if kind == "left":
        return None, jnp.asarray(np.arange(s)[None] >= (s - lengths)[:, None])
    # cache: T new tokens written at per-row offsets into an S-slot window, some slots masked out (warm start)
    offset = rng.integers(0, s - t + 1, size=b).astype(np.int32)
    offset[0] = 0
    valid = rng.random((b, s)) > 0.2
    return jnp.asarray(offset), jnp.asarray(valid)


def _seen(offset, key_valid, b, t, s) -> np.ndarray:
    """[B, T] bool: queries that see at least one key (the others are padding; both sides leave them finite)."""
    off = np.zeros(b, int) if offset is None else np.asarray(offset)
    valid = np.ones((b, s), bool) if key_valid is None else np.asarray(key_valid)
    vis = (np.arange(s)[None, None] <= off[:, None, None] + np.arange(t)[None, :, None]) & valid[:, None, :]
    return vis.any(-1)


def _run(fn, q, k, v, weight):
    """(out, loss = sum(out * weight), grads of loss w.r.t. q, k, v), in one jitted call."""
    def loss(q, k, v):
        out = fn(q, k, v)
        return jnp.sum(out.astype(jnp.float32) * weight), out
    (value, out), grads = jax.jit(jax.value_and_grad(loss, argnums=(0, 1, 2), has_aux=True))(q, k, v)
    return np.asarray(out.astype(jnp.float32)), value, grads


CASES = [  # (mask kind, B, T, S, heads, kv heads, block_q, block_k)
    ("causal", 2, 37, 37, 4, 2, 16, 8),
    ("causal", 2, 37, 37, 4, 4, 16, 16),
    ("right", 3, 300, 300, 4, 2, 128, 64),
    ("left", 3, 300, 300, 4, 2, 128, 256),
    ("left", 2, 300, 300, 4, 4, 64, 128),
    ("cache", 3, 20, 64, 4, 2, 8, 16),
    ("cache", 3, 45, 200, 4, 4, 16, 64),
    ("right", 2, 1000, 1000, 4, 2, 256, 256),
    ("right", 2, 384, 384, 2, 1, 256, 256),  # the trainer's 384 bucket: two blocks of 192
]


@pytest.mark.slow  # default run: too long for CI's 15 minutes on 2 cores
@pytest.mark.parametrize("kind,b,t,s,heads,kv_heads,bq,bk", CASES)
def test_blockwise_matches_dense_in_float32(kind, b, t, s, heads, kv_heads, bq, bk):
    q, k, v, rng = _inputs(b, t, s, heads, kv_heads)
    offset, valid = _padding(kind, b, t, s, rng)
    seen = _seen(offset, valid, b, t, s)
    weight = jnp.asarray(rng.standard_normal(q.shape) * seen[:, :, None, None], jnp.float32)
    blockwise = functools.partial(attn.blockwise_attention, offset=offset, key_valid=valid, block_q=bq, block_k=bk)
    dense = functools.partial(attn.dense_attention, offset=offset, key_valid=valid)
    (out_b, lb, gb), (out_d, ld, gd) = _run(blockwise, q, k, v, weight), _run(dense, q, k, v, weight)
    np.testing.assert_allclose(out_b[seen], out_d[seen], atol=1e-5, rtol=0)
    assert np.isfinite(out_b).all()
    np.testing.assert_allclose(lb, ld, atol=1e-6 * float(jnp.abs(weight).sum()))  # a sum of signed terms
    for got, want in zip(gb, gd):
        scale = float(jnp.abs(want).max())
        np.testing.assert_allclose(np.asarray(got), np.asarray(want), atol=1e-5 * max(scale, 1.0), rtol=0)


@pytest.mark.slow  # default run: too long for CI's 15 minutes on 2 cores
@pytest.mark.parametrize("kind", ["causal", "right", "left"])
@pytest.mark.parametrize("sort", [True, False])
def test_blockwise_with_query_positions_matches_dense(kind, sort):
    """Queries picked out of a longer sequence (the update's trained positions): N = 37 of S = 100 slots per row,
    query blocks of 16 and key blocks of 8; sorted as scored_positions gives them, and shuffled (still exact,
    only fewer blocks skipped)."""
    b, n, s = 3, 37, 100
    q, k, v, rng = _inputs(b, n, s, 4, 2)
    _, valid = _padding(kind, b, s, s, rng)
    picks = np.stack([rng.choice(s, n, replace=False) for _ in range(b)])
    picks = np.sort(picks, axis=1) if sort else picks
    positions = jnp.asarray(picks, jnp.int32)
    valid_np = np.ones((b, s), bool) if valid is None else np.asarray(valid)
    seen = np.stack([valid_np[r][None, :] & (np.arange(s)[None, :] <= picks[r][:, None]) for r in range(b)]).any(-1)
    weight = jnp.asarray(rng.standard_normal(q.shape) * seen[:, :, None, None], jnp.float32)
    blockwise = functools.partial(attn.blockwise_attention, key_valid=valid, query_positions=positions, block_q=16,
                                  block_k=8)
    dense = functools.partial(attn.dense_attention, key_valid=valid, query_positions=positions)
    (out_b, _, gb), (out_d, _, gd) = _run(blockwise, q, k, v, weight), _run(dense, q, k, v, weight)
    np.testing.assert_allclose(out_b[seen], out_d[seen], atol=1e-5, rtol=0)
    for got, want in zip(gb, gd):
        np.testing.assert_allclose(np.asarray(got), np.asarray(want), atol=1e-5 * max(float(jnp.abs(want).max()), 1.0),
                                   rtol=0)


@pytest.mark.slow  # default run: too long for CI's 15 minutes on 2 cores
@pytest.mark.parametrize("kind,b,t,s,heads,kv_heads,bq,bk", [CASES[0], CASES[2], CASES[3], CASES[5]])
def test_blockwise_bfloat16_is_as_accurate_as_dense(kind, b, t, s, heads, kv_heads, bq, bk):
    """Both bf16 forms against float32 attention of the same bf16 inputs: scores, softmax statistics and dS are
    float32 in blockwise, so it may not be less accurate than dense (measured on unit-variance inputs: output
    error 5e-3..7e-3 vs dense's 7e-3..1.1e-2; gradient error at most 1.32x dense's, both ~1e-2 on gradients
    of magnitude 2-5, which is bf16's rounding of the result)."""
    q, k, v, rng = _inputs(b, t, s, heads, kv_heads, dtype=jnp.bfloat16)
    offset, valid = _padding(kind, b, t, s, rng)
    seen = _seen(offset, valid, b, t, s)
    weight = jnp.asarray(rng.standard_normal(q.shape) * seen[:, :, None, None], jnp.float32)
    blockwise = functools.partial(attn.blockwise_attention, offset=offset, key_valid=valid, block_q=bq, block_k=bk)
    dense = functools.partial(attn.dense_attention, offset=offset, key_valid=valid)
    assert jax.eval_shape(blockwise, q, k, v).dtype == jnp.bfloat16
    ref, _, truth = _run(dense, *(x.astype(jnp.float32) for x in (q, k, v)), weight)
    (out_b, _, gb), (out_d, _, gd) = _run(blockwise, q, k, v, weight), _run(dense, q, k, v, weight)
    err_b = np.abs(out_b[seen] - ref[seen]).max()
    err_d = np.abs(out_d[seen] - ref[seen]).max()
    assert err_b <= 1.5 * err_d + 1e-3 and err_b < 2e-2, (err_b, err_d)
    for got, dense_g, want in zip(gb, gd, truth):
        assert got.dtype == jnp.bfloat16
        err_b = float(jnp.abs(got.astype(jnp.float32) - want).max())
        err_d = float(jnp.abs(dense_g.astype(jnp.float32) - want).max())
        assert err_b <= 1.5 * err_d + 1e-3, (err_b, err_d)


def test_query_lengths_skip_padding_queries_only():
    """Queries past query_lengths (a prefill bucket's tail) may be skipped; every other output and gradient is
    the dense one, with and without cache offsets."""
    q, k, v, rng = _inputs(3, 70, 100, 4, 2)
    lengths = jnp.asarray([5, 33, 17], jnp.int32)
    offset = jnp.asarray([0, 30, 12], jnp.int32)
    real = np.arange(70)[None] < np.asarray(lengths)[:, None]
    weight = jnp.asarray(rng.standard_normal(q.shape) * real[:, :, None, None], jnp.float32)
    blockwise = functools.partial(attn.blockwise_attention, offset=offset, query_lengths=lengths, block_q=16,
                                  block_k=16)
    dense = functools.partial(attn.dense_attention, offset=offset)
    (out_b, _, gb), (out_d, _, gd) = _run(blockwise, q, k, v, weight), _run(dense, q, k, v, weight)
    np.testing.assert_allclose(out_b[real], out_d[real], atol=1e-5, rtol=0)
    np.testing.assert_array_equal(out_b[:, 48:], 0.0)  # query blocks 3 and 4 (t >= 48 > every length) skipped
    for got, want in zip(gb, gd):
        np.testing.assert_allclose(got, want, atol=1e-5 * max(1.0, float(jnp.abs(want).max())), rtol=0)


@pytest.mark.slow  # default run: too long for CI's 15 minutes on 2 cores
def test_queries_without_keys_and_empty_rows_stay_finite():
    q, k, v, _ = _inputs(2, 24, 24, 4, 2)
    valid = jnp.asarray(np.stack([np.zeros(24, bool), np.arange(24) >= 20]))  # all padding; left-padded
    f = functools.partial(attn.blockwise_attention, key_valid=valid, block_q=8, block_k=8)
    out = f(q, k, v)
    np.testing.assert_array_equal(np.asarray(out[0]), 0.0)
    np.testing.assert_array_equal(np.asarray(out[1, :20]), 0.0)
    grads = jax.grad(lambda q, k, v: jnp.sum(f(q, k, v) ** 2), argnums=(0, 1, 2))(q, k, v)
    assert all(np.isfinite(np.asarray(g)).all() for g in grads)


@pytest.mark.slow  # default run: too long for CI's 15 minutes on 2 cores
def test_blockwise_never_holds_the_scores():
    """The compiled forward+backward at T = S = 2048 needs far less than one [B, H, T, S] float32 score tensor."""
    b, t, heads = 2, 2048, 4
    q, k, v, rng = _inputs(b, t, t, heads, 2)
    valid = jnp.asarray(np.arange(t)[None] < np.array([[t], [t // 2]]))
    grad = lambda fn: jax.jit(jax.grad(lambda q, k, v: jnp.sum(fn(q, k, v) ** 2), argnums=(0, 1, 2)))  # noqa: E731
    scores_bytes = b * heads * t * t * 4
    blockwise = grad(functools.partial(attn.blockwise_attention, key_valid=valid, block_q=256, block_k=256))
    dense = grad(functools.partial(attn.dense_attention, key_valid=valid))
    temp = lambda f: f.lower(q, k, v).compile().memory_analysis().temp_size_in_bytes  # noqa: E731
    assert temp(blockwise) < scores_bytes / 8 < scores_bytes < temp(dense)


def test_block_length_evens_the_blocks_and_keeps_their_count():
    """Fewer padded positions, as many blocks: 384 positions in 256-blocks are 2 x 192, not 2 x 256."""
    assert [attn.block_length(n, 256) for n in (100, 256, 384, 640, 896, 3584, 3712)] == [104, 256, 192, 224, 224,
                                                                                          256, 256]
    for block in (8, 16, 24, 64, 128, 256):
        for n in range(1, 2100, 7):
            size, count = attn.block_length(n, block), -(-n // block)
            assert size <= block and -(-n // size) == count, (n, block, size)
            assert count * size - n < 17 * count, (n, block, size)  # each block rounded up by less than 17


def test_choose_implementation():
    choose = functools.partial(attn.choose_implementation, head_dim=128, q_len=512, from_cache=False)
    for dtype in (jnp.float32, jnp.bfloat16, jnp.float16):  # the CPU never tries cuDNN
        assert choose(platform="cpu", dtype=dtype) == "blockwise"
    assert choose(platform="gpu", dtype=jnp.bfloat16, compute_capability="9.0") == "cudnn"
    assert choose(platform="gpu", dtype=jnp.float16, compute_capability="8.0") == "cudnn"
    assert choose(platform="gpu", dtype=jnp.float32, compute_capability="9.0") == "blockwise"
    assert choose(platform="gpu", dtype=jnp.bfloat16, compute_capability="7.5") == "blockwise"
    assert choose(platform="gpu", dtype=jnp.bfloat16, compute_capability=None) == "blockwise"  # not CUDA
    assert choose(platform="gpu", dtype=jnp.bfloat16, compute_capability="9.0", from_cache=True) == "blockwise"
    assert choose(platform="gpu", dtype=jnp.bfloat16, compute_capability="9.0", head_dim=256) == "cudnn"
    assert choose(platform="gpu", dtype=jnp.bfloat16, compute_capability="8.6", head_dim=256) == "blockwise"
    assert choose(platform="gpu", dtype=jnp.bfloat16, compute_capability="9.0", head_dim=60) == "blockwise"
    assert choose(platform="gpu", dtype=jnp.bfloat16, compute_capability="9.0", q_len=1) == "dense"
    assert choose(platform="cpu", dtype=jnp.float32, q_len=1, from_cache=True) == "dense"  # decode


def test_right_padding_detects_prefix_masks():
    lengths, ok = attn.right_padding(jnp.asarray([[1, 1, 0], [0, 0, 0], [1, 1, 1]], bool))
    np.testing.assert_array_equal(lengths, [2, 0, 3])
    assert bool(ok)
    assert not bool(attn.right_padding(jnp.asarray([[0, 1, 1], [1, 0, 0]], bool))[1])


@pytest.mark.slow  # default run: too long for CI's 15 minutes on 2 cores
@pytest.mark.parametrize("kind", ["causal", "right", "left"])
def test_cudnn_glue_on_the_cpu_through_xlas_fused_attention(monkeypatch, kind):
    """The cuDNN path's own logic (lengths from a right-padded mask, blockwise for any other mask) with cuDNN's
    kernel replaced by XLA's implementation of the same call, which runs on the CPU; queries past a row's
    length are padding and not compared."""
    fused = jax.nn.dot_product_attention

    def xla_instead(*args, implementation=None, **kwargs):
        assert implementation == "cudnn"
        return fused(*args, implementation="xla", **kwargs)

    monkeypatch.setattr(jax.nn, "dot_product_attention", xla_instead)
    q, k, v, rng = _inputs(3, 37, 37, 4, 2)
    _, valid = _padding(kind, 3, 37, 37, rng)
    got = attn.attention(q, k, v, key_valid=valid, implementation="cudnn")
    want = attn.dense_attention(q, k, v, None, valid)
    real = np.ones((3, 37), bool) if valid is None else np.array(valid)  # left padding's queries see no key
    np.testing.assert_allclose(np.asarray(got)[real], np.asarray(want)[real], atol=2e-6, rtol=0)


def test_attention_rejects_bad_input():
    q, k, v, _ = _inputs(2, 8, 8, 4, 2)
    _, k3, v3, _ = _inputs(2, 8, 8, 4, 3)
    with pytest.raises(ValueError, match="K dividing H"):
        attn.attention(q, k3, v3)
    with pytest.raises(ValueError, match="implementation must be one of"):
        attn.attention(q, k, v, implementation="flash")
    with pytest.raises(ValueError, match="without a cache"):
        attn.attention(q, k, v, offset=jnp.zeros(2, jnp.int32), implementation="cudnn")


# ------------------------------------------------------------------------------------------ through the model
def _use(monkeypatch, implementation: str, block: int = 32) -> None:
    """Route the models' attention through one implementation, with small blocks so rows span several."""
    monkeypatch.setattr(attn, "BLOCK_Q", block)
    monkeypatch.setattr(attn, "BLOCK_K", block)
    monkeypatch.setattr(transformer, "attention", functools.partial(attn.attention, implementation=implementation))


def _model_loss_and_grads(model, tokens, mask):
    graphdef, params = nnx.split(model)

    @jax.jit
    def loss(params):
        logits, _ = nnx.merge(graphdef, params)(tokens, positions_from_mask(mask), attention_mask=mask)
        logp = jax.nn.log_softmax(logits[:, :-1], axis=-1)
        picked = jnp.take_along_axis(logp, tokens[:, 1:, None], axis=-1)[..., 0]
        return -jnp.sum(picked * mask[:, 1:]), logits

    (value, logits), grads = jax.value_and_grad(loss, has_aux=True)(params)
    return value, logits, grads


@pytest.mark.parametrize("remat", ["dots", pytest.param("none", marks=pytest.mark.slow),
                                   pytest.param("full", marks=pytest.mark.slow)])
def test_model_loss_and_grads_match_dense(monkeypatch, remat):
    model = CausalLM(tiny_config(num_layers=2, vocab_size=256, remat=remat), rngs=nnx.Rngs(0))
    rng = np.random.default_rng(1)
    t = 75
    tokens = jnp.asarray(rng.integers(0, 256, (3, t)), jnp.int32)
    mask = jnp.asarray(np.arange(t)[None] < np.array([[t], [50], [9]]))
    _use(monkeypatch, "dense")
    want_loss, want_logits, want_grads = _model_loss_and_grads(model, tokens, mask)
    _use(monkeypatch, "blockwise")
    loss, logits, grads = _model_loss_and_grads(model, tokens, mask)
    np.testing.assert_allclose(loss, want_loss, rtol=1e-5)
    np.testing.assert_allclose(np.asarray(logits)[np.asarray(mask)], np.asarray(want_logits)[np.asarray(mask)],
                               atol=1e-5, rtol=0)
    for got, want in zip(jax.tree.leaves(grads), jax.tree.leaves(want_grads)):
        np.testing.assert_allclose(got, want, atol=1e-5 * max(1.0, float(jnp.abs(want).max())), rtol=0)


@pytest.mark.slow  # default run: too long for CI's 15 minutes on 2 cores
def test_model_prefill_at_row_offsets_matches_dense(monkeypatch):
    """A second chunk of 40 tokens prefilled at per-row offsets 0/7/30 into a 96-slot cache, window 80."""
    config = tiny_config(vocab_size=256)
    model = CausalLM(config, rngs=nnx.Rngs(0))
    graphdef, params = nnx.split(model)
    rng = np.random.default_rng(2)
    first = jnp.asarray(rng.integers(0, 256, (3, 30)), jnp.int32)
    second = jnp.asarray(rng.integers(0, 256, (3, 40)), jnp.int32)
    offsets = jnp.asarray([0, 7, 30], jnp.int32)

    def run(query_lengths=None):
        @jax.jit
        def two_chunks(params):
            m = nnx.merge(graphdef, params)
            cache = init_cache(config, 3, 96)
            zero = jnp.zeros((3,), jnp.int32)
            _, cache = m(first, jnp.broadcast_to(jnp.arange(30), (3, 30)), cache=cache, cache_index=zero, kv_len=80)
            pos = offsets[:, None] + jnp.arange(40)[None]
            return m(second, pos, cache=cache, cache_index=offsets, kv_len=80, query_lengths=query_lengths)
        return two_chunks(params)

    _use(monkeypatch, "dense")
    want, want_cache = run()
    _use(monkeypatch, "blockwise", block=16)
    got, got_cache = run()
    np.testing.assert_allclose(got, want, atol=1e-5, rtol=0)
    np.testing.assert_allclose(got_cache.k, want_cache.k, atol=1e-6, rtol=0)
    lengths = jnp.asarray([19, 21, 3], jnp.int32)  # the rest of each chunk is padding; block 2 (t >= 32) skipped
    got_short, _ = run(lengths)
    real = np.arange(40)[None] < np.asarray(lengths)[:, None]
    np.testing.assert_allclose(np.asarray(got_short)[real], np.asarray(want)[real], atol=1e-5, rtol=0)



@pytest.mark.slow  # default run: too long for CI's 15 minutes on 2 cores
@pytest.mark.parametrize("t", [1, 45])
def test_cache_layout_gives_the_same_attention(t):
    """The KV cache's layout (keys [B, K, hd, S], values [B, K, S, hd]) attends exactly as [B, S, K, hd], decode
    (dense) and prefill (blockwise, from a cache offset)."""
    q, k, v, _ = _inputs(2, t, 64, 4, 2)
    offset = jnp.asarray([3, 19 - t if t < 19 else 0], jnp.int32)
    valid = jnp.arange(64)[None, :] < jnp.asarray([40, 64])[:, None]
    want = attn.attention(q, k, v, offset=offset, key_valid=valid)
    got = attn.attention(q, k.transpose(0, 2, 3, 1), v.transpose(0, 2, 1, 3), offset=offset, key_valid=valid,
                         cache_layout=True)
    np.testing.assert_allclose(np.asarray(got), np.asarray(want), atol=1e-6)


def test_a_short_cache_window_is_read_in_small_key_blocks():
    """A prefill reading a cache window of one default block cuts it into CACHE_WINDOW_BLOCK_K-slot blocks (so the
    causal skip drops the slots past the prompt); longer windows and attention without a cache keep BLOCK_K."""
    assert attn.key_block_length(192, cache_layout=True) == attn.CACHE_WINDOW_BLOCK_K == 64
    assert attn.key_block_length(attn.BLOCK_K, cache_layout=True) == 64
    assert attn.key_block_length(192) == 192 and attn.key_block_length(3072, cache_layout=True) == attn.BLOCK_K
    assert attn.key_block_length(192, block_k=96, cache_layout=True) == 96


@pytest.mark.slow  # default run: too long for CI's 15 minutes on 2 cores
@pytest.mark.parametrize("start", [0, 57])
def test_prefill_into_a_short_cache_window_matches_dense(start):
    """A 100-token prefill at cache offset `start` into a 192-slot window (three 64-slot key blocks, the last ones
    past some rows' queries) attends as the dense form does."""
    q, k, v, _ = _inputs(3, 100, 192, 4, 2)
    offset = jnp.asarray([start, 0, start + 30], jnp.int32)
    want = attn.dense_attention(q, k, v, offset=offset)
    got = attn.attention(q, k.transpose(0, 2, 3, 1), v.transpose(0, 2, 1, 3), offset=offset, cache_layout=True)
    np.testing.assert_allclose(np.asarray(got), np.asarray(want), atol=2e-6)


@pytest.mark.parametrize("implementation", ["blockwise", "dense"])
def test_non_finite_slots_past_every_query_stay_out_of_outputs_and_gradients(implementation):
    """A cache's slots past a row's last query (and slots key_valid masks) may hold NaN or inf from earlier use:
    outputs equal the clean cache's, and so do blockwise's gradients (the warm start trains through a cache; the
    dense form, for decode steps, masks only the values)."""
    q, k, v, rng = _inputs(3, 20, 64, 4, 2)
    offset = jnp.asarray([0, 13, 44], jnp.int32)
    valid = jnp.asarray(rng.random((3, 64)) > 0.2)
    unseen = ~((np.arange(64)[None] < np.asarray(offset)[:, None] + 20) & np.asarray(valid))  # [B, S]
    weight = jnp.asarray(rng.standard_normal((3, 20, 4, 16)), jnp.float32)
    ck, cv = k.transpose(0, 2, 3, 1), v.transpose(0, 2, 1, 3)  # the cache's layout

    def fn(q, ck, cv):
        return attn.attention(q, ck, cv, offset=offset, key_valid=valid, implementation=implementation,
                              cache_layout=True)

    want, want_loss, want_grads = _run(fn, q, ck, cv, weight)
    for bad in (jnp.nan, jnp.inf):
        bad_k = jnp.where(jnp.asarray(unseen)[:, None, None, :], bad, ck)
        bad_v = jnp.where(jnp.asarray(unseen)[:, None, :, None], bad, cv)
        got, loss, grads = _run(fn, q, bad_k, bad_v, weight)
        np.testing.assert_allclose(got, want, atol=1e-6, rtol=0)
        # loss = sum(out * weight): each output may move by the 1e-6 just allowed
        np.testing.assert_allclose(loss, want_loss, rtol=1e-6, atol=1e-6 * float(jnp.abs(weight).sum()))
        for g, w in zip(grads if implementation == "blockwise" else (), want_grads):
            assert np.isfinite(np.asarray(g)).all()
            np.testing.assert_allclose(g, w, atol=1e-6, rtol=0)
