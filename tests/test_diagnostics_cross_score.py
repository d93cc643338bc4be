"""Cross-scoring with a tiny random model equals a direct per-pair forward pass."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from ragen_jax.diagnostics.cross_score import cross_score
from ragen_jax.models import CausalLM, ModelConfig


def tiny_model(seed: int = 0, vocab: int = 48) -> CausalLM:
    cfg = ModelConfig(
        architecture="qwen3", vocab_size=vocab, hidden_size=32, intermediate_size=64, num_layers=2,
        num_heads=4, num_kv_heads=2, head_dim=8, qk_norm=True,
    )
    return CausalLM(cfg, rngs=nnx.Rngs(seed))


@functools.partial(jax.jit, static_argnums=0)
def _full_logp_jit(graphdef, params, seq, temperature=1.0):
    model = nnx.merge(graphdef, params)
    logits, _ = model(seq, jnp.arange(seq.shape[1], dtype=jnp.int32)[None])
    return jax.nn.log_softmax(logits[0] / temperature, axis=-1)


def direct_logprob(model: CausalLM, prompt, reasoning, width: int = 24, temperature: float = 1.0) -> float:
    """Summed log p(reasoning | prompt) from one uncached forward pass (right padding is inert)."""
    seq = np.zeros((1, width), np.int32)
    seq[0, : len(prompt) + len(reasoning)] = list(prompt) + list(reasoning)
    graphdef, params = nnx.split(model)
    logp = np.asarray(_full_logp_jit(graphdef, params, jnp.asarray(seq), temperature))
    p = len(prompt)
    return float(sum(logp[p - 1 + t, z] for t, z in enumerate(reasoning)))


@pytest.mark.slow  # default run: too long for CI's 15 minutes on 2 cores
def test_cross_score_matches_direct_per_pair():
    model = tiny_model()
    graphdef, params = nnx.split(model)
    rng = np.random.default_rng(0)
    prompts = [rng.integers(1, 48, size=n).tolist() for n in (5, 1, 9, 3)]
    reasonings = [rng.integers(1, 48, size=n).tolist() for n in (4, 7, 1)] + [[]]
    L_mean, L_sum = cross_score(graphdef, params, prompts, reasonings, pad_id=0, batch_size=5)
    assert L_mean.shape == L_sum.shape == (4, 4)
    for i, z in enumerate(reasonings):
        for j, x in enumerate(prompts):
            want = direct_logprob(model, x, z) if z else 0.0
            assert L_sum[i, j] == pytest.approx(want, abs=2e-4), (i, j)
            assert L_mean[i, j] == pytest.approx(want / max(len(z), 1), abs=2e-4)


@pytest.mark.slow  # default run: too long for CI's 15 minutes on 2 cores
def test_pairs_of_different_length_buckets_batch_apart_and_still_match_direct():
    """Pairs run in batches by their (prompt, reasoning) length buckets, each with its own reasoning width and cache
    window; every pair still scores as a direct forward pass does."""
    model = tiny_model(2)
    graphdef, params = nnx.split(model)
    rng = np.random.default_rng(1)
    prompts = [rng.integers(1, 48, size=n).tolist() for n in (30, 3, 12)]  # buckets 32, 8, 16
    reasonings = [rng.integers(1, 48, size=n).tolist() for n in (20, 2, 9)]  # buckets 32, 8, 16
    L_mean, L_sum = cross_score(graphdef, params, prompts, reasonings, pad_id=0, batch_size=2)
    for i, z in enumerate(reasonings):
        for j, x in enumerate(prompts):
            want = direct_logprob(model, x, z, width=64)
            assert L_sum[i, j] == pytest.approx(want, abs=2e-4), (i, j)
            assert L_mean[i, j] == pytest.approx(want / len(z), abs=2e-4)


@pytest.mark.slow  # default run: too long for CI's 15 minutes on 2 cores
def test_cross_score_batch_size_does_not_change_results():
    model = tiny_model(1)
    graphdef, params = nnx.split(model)
    prompts = [[3, 4, 5], [6, 7], [8]]
    reasonings = [[9, 10], [11, 12, 13]]
    a = cross_score(graphdef, params, prompts, reasonings, pad_id=0, batch_size=1)
    b = cross_score(graphdef, params, prompts, reasonings, pad_id=0, batch_size=64)
    np.testing.assert_allclose(a[0], b[0], atol=1e-5)
    np.testing.assert_allclose(a[1], b[1], atol=1e-5)


def test_cross_score_rejects_empty_prompt():
    graphdef, params = nnx.split(tiny_model())
    with pytest.raises(ValueError, match="empty prompt"):
        cross_score(graphdef, params, [[1], []], [[2]], pad_id=0)



def test_cross_score_divides_the_logits_by_the_temperature():
    """Scored as the update scores (veRL's log-probs divide by the rollout temperature, and so do RAGEN's)."""
    model = tiny_model(3)
    graphdef, params = nnx.split(model)
    prompts, reasonings = [[3, 7, 11], [5]], [[4, 9, 2], [8]]
    _, cold = cross_score(graphdef, params, prompts, reasonings, pad_id=0, temperature=0.5)
    _, plain = cross_score(graphdef, params, prompts, reasonings, pad_id=0)
    for i, z in enumerate(reasonings):
        for j, x in enumerate(prompts):
            assert cold[i, j] == pytest.approx(direct_logprob(model, x, z, temperature=0.5), abs=2e-4), (i, j)
    assert np.abs(cold - plain).max() > 1e-2
    with pytest.raises(ValueError, match="temperature"):
        cross_score(graphdef, params, prompts, reasonings, pad_id=0, temperature=0.0)
