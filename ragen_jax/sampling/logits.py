"""Logit processing (temperature, top-k, then top-p) and one sampling step over a batch of logits."""

from __future__ import annotations

import math

import chex
import jax
import jax.numpy as jnp
import numpy as np

from ragen_jax.sampling.config import SamplingConfig


def _nucleus_threshold(sorted_desc: jax.Array, top_p: float, log_total: jax.Array | None = None) -> jax.Array:
    """Smallest logit kept by nucleus filtering, from logits sorted descending [B, K] -> [B, 1].

    A token is kept when the probability mass strictly before it is < top_p, so the top token always stays.
    log_total [B, 1]: log of the whole candidate set's mass, when it holds more than these K logits (the ties of
    the K-th one that top-k also keeps); default: the K logits' own.
    """
    if log_total is None:
        log_total = jax.nn.logsumexp(sorted_desc, axis=-1, keepdims=True)
    probs = jnp.exp(sorted_desc - log_total)
    mass_before = jnp.cumsum(probs, axis=-1) - probs
    n_keep = jnp.sum(mass_before < top_p, axis=-1, keepdims=True)
    return jnp.take_along_axis(sorted_desc, jnp.maximum(n_keep, 1) - 1, axis=-1)


def _order_keys(x: jax.Array) -> jax.Array:
    """float32 [...] -> int32 [...] in the same order as the floats (-0.0 sorts just below +0.0)."""
    bits = jax.lax.bitcast_convert_type(x, jnp.int32)
    return jnp.where(bits < 0, bits ^ 0x7FFFFFFF, bits)


def _key_values(keys: jax.Array) -> jax.Array:
    """The inverse of `_order_keys`: int32 [...] -> float32 [...]."""
    return jax.lax.bitcast_convert_type(jnp.where(keys < 0, keys ^ 0x7FFFFFFF, keys), jnp.float32)


def _nucleus_threshold_unsorted(x: jax.Array, top_p: float) -> jax.Array:
    """`_nucleus_threshold` of logits in any order, without sorting them: x [B, V] -> [B, 1].

    The threshold is the smallest logit v whose strictly larger logits hold < top_p of the mass (the first of a
    run of ties is the one sorted first). That mass only falls as v rises, so a bisection over the float order
    (32 halvings of the int32 range, each a masked sum over the vocabulary) finds it exactly. XLA:CPU's sort of
    the vocabulary is a slow kernel, far slower than these sums (`experiments/bench/bench_generate.py --top-p 0.9`).
    """
    keys = _order_keys(x)
    probs = jax.nn.softmax(x, axis=-1)
    int_min = jnp.iinfo(jnp.int32).min
    below = jnp.maximum(jnp.min(keys, axis=-1, keepdims=True), int_min + 1) - 1  # mass above >= top_p
    kept = jnp.max(keys, axis=-1, keepdims=True)  # mass above < top_p (none above)

    def halve(_, bounds):
        below, kept = bounds
        mid = (below >> 1) + (kept >> 1) + (below & kept & 1)  # floor((below + kept) / 2) without overflow
        ok = jnp.sum(jnp.where(keys > mid, probs, 0.0), axis=-1, keepdims=True) < top_p
        return jnp.where(ok, below, mid), jnp.where(ok, mid, kept)

    _, kept = jax.lax.fori_loop(0, 32, halve, (below, kept), unroll=True)
    return _key_values(kept)


def _is_static(temperature) -> bool:
    """Whether a temperature is a plain number (known while tracing) rather than an array argument."""
    return isinstance(temperature, (int, float, np.number))


def process_logits(logits: jax.Array, config: SamplingConfig, temperature=None) -> jax.Array:
    """Sampling-distribution logits [B, V]: logits / temperature, -inf outside top-k, then outside the nucleus.

    temperature: a scalar (a traced one in the compiled programs) in place of config.temperature."""
    chex.assert_rank(logits, 2)
    x = logits.astype(jnp.float32)
    t = config.temperature if temperature is None else temperature
    if not (_is_static(t) and t == 1.0):
        x = x / t
    vocab = x.shape[-1]
    if 0 < config.top_k < vocab:
        top_vals, _ = jax.lax.top_k(x, config.top_k)
        threshold = top_vals[:, -1:]  # top-k keeps every tie of its k-th logit (as vLLM and transformers do)
        if config.top_p < 1.0:  # the nucleus's mass is over everything top-k kept, those ties included
            kept_mass = jax.nn.logsumexp(jnp.where(x >= threshold, x, -jnp.inf), axis=-1, keepdims=True)
            threshold = _nucleus_threshold(top_vals, config.top_p, kept_mass)
        return jnp.where(x >= threshold, x, -jnp.inf)
    if config.top_p < 1.0:
        return jnp.where(x >= _nucleus_threshold_unsorted(x, config.top_p), x, -jnp.inf)
    return x


def token_logprobs(logits: jax.Array, tokens: jax.Array) -> jax.Array:
    """log softmax(logits)[token] per row: logits [B, V], tokens [B] -> [B] float32 (no full log-softmax)."""
    chex.assert_rank([logits, tokens], [2, 1])
    picked = jnp.take_along_axis(logits, tokens[:, None], axis=-1)[:, 0]
    return picked - jax.nn.logsumexp(logits, axis=-1)


def first_argmax(x: jax.Array) -> jax.Array:
    """jnp.argmax over the last axis (the first index of the maximum) as two plain reductions: x [B, V] -> [B]
    int32. XLA:CPU's fused value-and-index reduction is slower than the two on decode-step logits
    (`experiments/bench/bench_draw.py` times the draws beside it). A row holding NaN gives its last index."""
    v = x.shape[-1]
    first = jnp.min(jnp.where(x == jnp.max(x, axis=-1, keepdims=True), jnp.arange(v, dtype=jnp.int32), v), axis=-1)
    return jnp.minimum(first, v - 1)


def draw_index(u: jax.Array, weights: jax.Array) -> jax.Array:
    """The first index i with weights[i] > 0 and u * total < cdf[i], cdf the running sum of weights and total the
    largest cdf entry of a positive weight: u [B, 1] in [0, 1), weights [B, N] >= 0 -> [B] int32 (N: no positive
    weight). XLA's parallel running sum is not always nondecreasing in its last bits, so "the number of cdf entries
    <= u * total" could land on a zero weight (a token outside top-k or top-p, with a sampling log-prob of -inf:
    1.4e-5 per draw in a 151,936-token row with every 7th token and the last 3,000 masked)."""
    chex.assert_rank([u, weights], 2)
    n = weights.shape[-1]
    cdf = jnp.cumsum(weights, axis=-1)
    positive = weights > 0
    total = jnp.max(jnp.where(positive, cdf, 0.0), axis=-1, keepdims=True)
    return jnp.min(jnp.where(positive & (cdf > u * total), jnp.arange(n, dtype=jnp.int32), n), axis=-1)


def draw_block_size(vocab: int) -> int:
    """Tokens per block of `inverse_cdf_categorical`'s first stage: the power of two at or above sqrt(vocab)."""
    return 1 << max(0, math.ceil(math.log2(math.sqrt(max(vocab, 1)))))


def inverse_cdf_categorical(key: jax.Array, logits: jax.Array) -> jax.Array:
    """One index per row of logits [B, V] (-inf: never drawn) with P(i) = softmax(logits)[i] -> [B] int32.

    Two inverse-CDF stages, each with its own uniform and `draw_index`: a block of `draw_block_size(V)` tokens by
    the blocks' masses, then a token in that block by its weights exp(logits - max). A single draw against the
    running sum of all V weights is off softmax by a total variation of 3.3e-3 at 151,936 tokens (a float32 uniform
    has 2^23 values and a float32 sum over V terms drifts); the two stages sum ~sqrt(V) terms each and are off by
    1.4e-5 there (1.5e-6 at 1,119), and faster too (fewer terms per prefix sum). `jax.random.categorical` draws V
    Gumbel variates per row instead, far more work on the CPU. Timings: experiments/bench/bench_draw.py; the learning
    evidence for the switch: docs/performance.md, "The token draw"."""
    chex.assert_rank(logits, 2)
    b, v = logits.shape
    size = draw_block_size(v)
    n_blocks = -(-v // size)
    u = jax.random.uniform(key, (b, 2), jnp.float32)
    weights = jnp.exp(logits - jnp.max(logits, axis=-1, keepdims=True))
    blocks = jnp.pad(weights, ((0, 0), (0, n_blocks * size - v))).reshape(b, n_blocks, size)
    block = jnp.minimum(draw_index(u[:, :1], jnp.sum(blocks, axis=-1)), n_blocks - 1)
    in_block = jnp.take_along_axis(blocks, block[:, None, None], axis=1)[:, 0]
    return jnp.minimum(block * size + jnp.minimum(draw_index(u[:, 1:], in_block), size - 1), v - 1)


def sample_step(key: jax.Array, logits: jax.Array, config: SamplingConfig,
                temperature=None) -> tuple[jax.Array, jax.Array, jax.Array]:
    """Picks one token per row from raw logits [B, V] -> (tokens [B] int32, logprobs [B], raw_logprobs [B]).

    logprobs are under the sampling distribution (also for greedy), raw_logprobs under the raw model.
    temperature: a scalar, possibly traced, in place of config.temperature (one compiled program then serves every
    temperature); at temperature 1 without top-k/top-p the sampling distribution is the raw one and its log-probs
    are not computed twice.
    """
    chex.assert_rank(logits, 2)
    logits = logits.astype(jnp.float32)
    t = config.temperature if temperature is None else temperature
    if config.greedy:
        tokens, processed = first_argmax(_banned(logits, config)), None
    else:
        processed = _banned(process_logits(logits, config, t), config)  # logits / 1.0 is logits, bit for bit
        tokens = inverse_cdf_categorical(key, processed)
    raw = token_logprobs(logits, tokens)
    sampling_logprobs = lambda: token_logprobs(  # noqa: E731
        _banned(process_logits(logits, config, t), config) if processed is None else processed, tokens)
    if config.truncates:
        sampled = sampling_logprobs()
    elif _is_static(t):
        sampled = raw if t == 1.0 else sampling_logprobs()
    else:  # a traced temperature: the program decides at run time
        sampled = jax.lax.cond(t == 1.0, lambda: raw, sampling_logprobs)
    return tokens, sampled, raw


def _banned(logits: jax.Array, config: SamplingConfig) -> jax.Array:
    """logits [B, V] with config.banned_ids never drawn (-inf); logits themselves without any."""
    if not config.banned_ids:
        return logits
    return logits.at[:, jnp.asarray(config.banned_ids, jnp.int32)].set(-jnp.inf)


def sample_rows(keys: jax.Array, logits: jax.Array, config: SamplingConfig,
                temperature=None) -> tuple[jax.Array, jax.Array, jax.Array]:
    """`sample_step` with one key per row: keys [B] (typed), logits [B, V] -> (tokens [B], logprobs [B], raw [B]).

    Row b's token depends only on keys[b] and its own logits, so it does not depend on the batch it is in."""
    chex.assert_rank(logits, 2)
    one = lambda key, row: sample_step(key, row[None], config, temperature)  # noqa: E731
    tokens, sampled, raw = jax.vmap(one)(keys, logits)
    return tokens[:, 0], sampled[:, 0], raw[:, 0]
