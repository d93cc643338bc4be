"""Chunked log-probs/entropy: equal to the unchunked computation (values and gradients) and
never materialising the full [B, T, V] logits (XLA's compiled memory analysis)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from ragen_jax import algos


def _data(b=2, t=37, d=16, v=50, seed=0):
    ks = jax.random.split(jax.random.key(seed), 3)
    hidden = jax.random.normal(ks[0], (b, t, d))
    head = jax.random.normal(ks[1], (d, v)) / 4
    targets = jax.random.randint(ks[2], (b, t), 0, v)
    return hidden, head, targets


def test_logprobs_from_logits_by_hand():
    logits = jnp.array([[[0.0, jnp.log(3.0)]]])  # probs 1/4, 3/4
    lp, ent = algos.logprobs_from_logits(logits, jnp.array([[1]]))
    np.testing.assert_allclose(lp, [[np.log(0.75)]], rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(ent, [[-(0.25 * np.log(0.25) + 0.75 * np.log(0.75))]], rtol=1e-6, atol=1e-6)
    lp_t, _ = algos.logprobs_from_logits(logits, jnp.array([[1]]), temperature=2.0)  # logits / 2
    np.testing.assert_allclose(lp_t, [[np.log(np.sqrt(3) / (1 + np.sqrt(3)))]], rtol=1e-6, atol=1e-6)


@pytest.mark.slow  # default run: too long for CI's 15 minutes on 2 cores
@pytest.mark.parametrize("chunk_size", [5, 8, 37, 64])
@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_chunked_equals_unchunked(chunk_size, temperature):
    hidden, head, targets = _data()
    lp, ent = jax.jit(algos.token_logprobs_and_entropy, static_argnames=("chunk_size", "temperature"))(
        hidden, head, targets, chunk_size=chunk_size, temperature=temperature)
    ref_lp, ref_ent = algos.logprobs_from_logits(hidden @ head, targets, temperature=temperature)
    assert lp.shape == ent.shape == targets.shape
    np.testing.assert_allclose(lp, ref_lp, atol=1e-5)
    np.testing.assert_allclose(ent, ref_ent, atol=1e-5)


def test_chunked_gradients_equal_unchunked():
    hidden, head, targets = _data()
    weights = jax.random.normal(jax.random.key(5), targets.shape)

    def objective(fn):
        def f(h, w):
            lp, ent = fn(h, w)
            return jnp.sum(weights * lp) + 0.3 * jnp.sum(ent)
        return jax.grad(f, argnums=(0, 1))

    chunked = objective(lambda h, w: algos.token_logprobs_and_entropy(h, w, targets, chunk_size=8))
    plain = objective(lambda h, w: algos.logprobs_from_logits(h @ w, targets))
    for g, r in zip(jax.jit(chunked)(hidden, head), jax.jit(plain)(hidden, head)):
        np.testing.assert_allclose(g, r, atol=1e-4, rtol=1e-4)


def test_chunked_never_materialises_full_logits():
    b, t, d, v = 2, 256, 64, 32768
    spec = (jax.ShapeDtypeStruct((b, t, d), jnp.float32), jax.ShapeDtypeStruct((d, v), jnp.float32),
            jax.ShapeDtypeStruct((b, t), jnp.int32))
    full_logits_bytes = b * t * v * 4

    def temp_bytes(fn):
        forward = jax.jit(fn).lower(*spec).compile().memory_analysis().temp_size_in_bytes
        loss = lambda h, w, y: sum(x.sum() for x in fn(h, w, y))  # noqa: E731
        backward = jax.jit(jax.grad(loss, argnums=(0, 1))).lower(*spec).compile().memory_analysis()
        return forward, backward.temp_size_in_bytes

    chunked = temp_bytes(lambda h, w, y: algos.token_logprobs_and_entropy(h, w, y, chunk_size=16, remat=True))
    naive = temp_bytes(lambda h, w, y: algos.logprobs_from_logits(h @ w, y))
    # The measurement sees materialised logits (naive needs >= one full copy) ...
    assert naive[0] >= full_logits_bytes and naive[1] >= full_logits_bytes
    # ... and the chunked version stays far below (forward ~2 chunks; backward adds the [D, V] grad).
    assert chunked[0] < full_logits_bytes / 4, chunked
    assert chunked[1] < full_logits_bytes / 2, chunked


@pytest.mark.slow  # default run: too long for CI's 15 minutes on 2 cores
def test_chunks_are_evened_so_the_head_does_little_padding_work():
    """300 positions in chunks of at most 256 are 2 x 150 (the head multiplies [B*150, D] rows per chunk), not
    2 x 256: the padded 212 positions used to cost 70% more vocabulary-head work."""
    hidden, head, targets = _data(t=300)
    text = jax.jit(algos.token_logprobs_and_entropy, static_argnames=("chunk_size",)).lower(
        hidden, head, targets, chunk_size=256).as_text()
    assert "tensor<300x50xf32>" in text and "tensor<512x50xf32>" not in text
    lp, _ = algos.token_logprobs_and_entropy(hidden, head, targets, chunk_size=256)
    np.testing.assert_allclose(lp, algos.logprobs_from_logits(hidden @ head, targets)[0], atol=1e-5)


def test_bad_shapes_fail_clearly():
    hidden, head, targets = _data()
    with pytest.raises(AssertionError):
        algos.token_logprobs_and_entropy(hidden, head.T, targets)
    with pytest.raises(ValueError, match="chunk_size"):
        algos.token_logprobs_and_entropy(hidden, head, targets, chunk_size=0)


def test_out_of_range_targets_stay_finite():
    hidden, head, targets = _data()
    targets = targets.at[:, -3:].set(-100)  # an ignore-index convention
    lp, ent = algos.token_logprobs_and_entropy(hidden, head, targets, chunk_size=8)
    assert np.all(np.isfinite(lp)) and np.all(np.isfinite(ent))


@pytest.mark.slow  # default run: too long for CI's 15 minutes on 2 cores
def test_remat_or_not_gives_the_same_values_and_gradients_and_auto_remats_large_logits(monkeypatch):
    from ragen_jax.algos import logprobs as lp_module

    hidden, head, targets = _data()
    objective = lambda remat: jax.value_and_grad(  # noqa: E731
        lambda h, w: sum(x.sum() for x in algos.token_logprobs_and_entropy(h, w, targets, chunk_size=8, remat=remat)),
        argnums=(0, 1))(hidden, head)
    (v1, g1), (v2, g2) = objective(True), objective(False)
    # v sums 74 log-probs (~ -4 each) and 74 entropies (~ +4): partial sums near 300, whose float32 ulp is 3e-5
    np.testing.assert_allclose(v1, v2, rtol=1e-6, atol=1e-4)
    for a, b in zip(g1, g2):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
    text = lambda: str(jax.make_jaxpr(jax.grad(lambda h: algos.token_logprobs_and_entropy(  # noqa: E731
        h, head, targets, chunk_size=8)[0].sum()))(hidden))
    assert "remat" not in text()  # small logits: kept for the backward pass, not recomputed
    monkeypatch.setattr(lp_module, "REMAT_LOGITS_BYTES", 16)
    assert "remat" in text()
