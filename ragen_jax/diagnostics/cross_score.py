"""Cross-scoring: log p(z_i | x_j) of every sampled reasoning under every prompt column.

Each distinct prompt is prefilled once into a KV cache (all but its last token); every
(reasoning, column) pair then runs only [last prompt token, z tokens] against that column's
cache rows, so the cost is C*P + R*C*Z tokens instead of R*C*(P+Z). Pairs are batched by the
buckets of their reasoning and prompt lengths, and each batch runs only its own reasoning width
and reads only the cache slots its prompts reach: RAGEN's prompts and reasonings vary several-fold
in length, and padding every pair to the longest paid for the difference. Lengths are bucketed to
powers of two and the pair batch is fixed, so a run compiles a handful of programs.
"""

from __future__ import annotations

import functools
from typing import Any, Sequence

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from ragen_jax.algos.logprobs import token_logprobs_and_entropy
from ragen_jax.models import KVCache, init_cache
from ragen_jax.sharding.distributed import gather_to_host


def _bucket(n: int, minimum: int = 8) -> int:
    """Next power of two >= max(n, minimum)."""
    return 1 << (max(int(n), minimum) - 1).bit_length()


@functools.partial(jax.jit, static_argnums=(0, 4))
def _prefill(graphdef: Any, params: Any, tokens: jax.Array, lengths: jax.Array, max_len: int) -> KVCache:
    """Writes prompts [C, P] (right-padded, `lengths` real tokens) into a fresh cache [.., C, S, ..]."""
    model = nnx.merge(graphdef, params)
    rows, width = tokens.shape
    cache = init_cache(model.config, rows, max_len)
    positions = jnp.broadcast_to(jnp.arange(width, dtype=jnp.int32), (rows, width))
    _, cache = model.hidden(tokens, positions, cache=cache, cache_index=jnp.zeros((rows,), jnp.int32))
    return cache


@functools.partial(jax.jit, static_argnums=(0, 7))
def _score_pairs(
    graphdef: Any,
    params: Any,
    cache: KVCache,
    cols: jax.Array,
    tokens: jax.Array,
    start: jax.Array,
    mask: jax.Array,
    window: int,
    temperature: jax.Array,
) -> tuple[jax.Array, jax.Array]:
    """Summed and mean log-probs [B] of tokens[:, 1:] (mask [B, Z]) given column caches `cols` [B], under the
    logits divided by `temperature` (traced: every temperature shares the program).

    tokens [B, Z+1] = [last prompt token, z...]; `start` [B] is that token's cache slot; `window` (static)
    cache slots hold every pair's prompt and tokens, and only those are copied and attended to.
    """
    model = nnx.merge(graphdef, params)
    rows, width = tokens.shape
    pair_cache = cache.first_slots(window).take_rows(cols)
    positions = start[:, None] + jnp.arange(width, dtype=jnp.int32)[None, :]
    hidden, _ = model.hidden(tokens, positions, cache=pair_cache, cache_index=start)
    # chunked over Z: the [B, Z, vocab] logits never exist at once (2.5 GB per batch at Qwen's 152k vocabulary)
    target, _ = token_logprobs_and_entropy(hidden[:, :-1], model.lm_head_matrix(), tokens[:, 1:], chunk_size=32,
                                           temperature=temperature)
    total = jnp.sum(jnp.where(mask, target, 0.0), axis=-1)
    count = jnp.maximum(jnp.sum(mask, axis=-1), 1)
    return total, total / count


def _pad_rows(seqs: Sequence[Sequence[int]], width: int, pad_id: int) -> np.ndarray:
    out = np.full((len(seqs), width), pad_id, dtype=np.int32)
    for r, seq in enumerate(seqs):
        out[r, : len(seq)] = seq
    return out


def cross_score(
    graphdef: Any,
    params: Any,
    prompts: Sequence[Sequence[int]],
    reasonings: Sequence[Sequence[int]],
    pad_id: int,
    batch_size: int = 32,
    temperature: float = 1.0,
) -> tuple[np.ndarray, np.ndarray]:
    """(L_mean [R, C], L_sum [R, C]): mean and summed log p(z_i | x_j) over z_i's tokens.

    prompts [C] are full contexts ending where reasoning starts (e.g. after "<think>");
    reasonings [R] are token ids. An empty reasoning scores 0. `batch_size` pairs run per call.
    `temperature` divides the logits, as the trainer's log-probs (RAGEN scores with veRL's, which divide by the
    rollout temperature).
    """
    if not temperature > 0:
        raise ValueError(f"cross_score needs temperature > 0, got {temperature}.")
    if not prompts or any(len(p) == 0 for p in prompts):
        raise ValueError("cross_score needs at least one prompt column and no empty prompt.")
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}.")
    num_rows, num_cols = len(reasonings), len(prompts)
    if num_rows == 0:
        return np.zeros((0, num_cols)), np.zeros((0, num_cols))
    prompt_len = np.array([len(p) for p in prompts], dtype=np.int32)
    width_p = _bucket(int(prompt_len.max()))
    width_z = _bucket(max(len(z) for z in reasonings))
    cols_padded = _bucket(num_cols, minimum=1)
    heads = [list(p[:-1]) for p in prompts] + [[]] * (cols_padded - num_cols)
    cache_len = width_p + width_z + 1
    cache = _prefill(
        graphdef, params, jnp.asarray(_pad_rows(heads, width_p, pad_id)),
        jnp.asarray(np.pad(prompt_len - 1, (0, cols_padded - num_cols))), cache_len,
    )
    # Pairs sorted by (prompt bucket, reasoning bucket), then cut into batches: a batch is mostly one shape.
    z_len = np.array([len(z) for z in reasonings], dtype=np.int32)
    pair_row, pair_col = (x.reshape(-1) for x in np.meshgrid(np.arange(num_rows), np.arange(num_cols), indexing="ij"))
    order = np.lexsort((z_len[pair_row], prompt_len[pair_col], np.vectorize(_bucket)(z_len[pair_row]),
                        np.vectorize(_bucket)(prompt_len[pair_col])))
    num_pairs = num_rows * num_cols
    total = -(-num_pairs // batch_size) * batch_size
    order = np.concatenate([order, np.full(total - num_pairs, order[-1])])  # masked dummy pairs fill the last batch
    z_tok = _pad_rows(reasonings, width_z, pad_id)
    last_tok = np.array([p[-1] for p in prompts], dtype=np.int32)
    sums, means = np.zeros(num_pairs), np.zeros(num_pairs)
    for lo in range(0, total, batch_size):
        pairs = order[lo : lo + batch_size]
        real = np.arange(lo, lo + batch_size) < num_pairs
        rows, cols = pair_row[pairs], pair_col[pairs]
        width = _bucket(int(z_len[rows].max()))
        tokens = np.concatenate([last_tok[cols, None], z_tok[rows, :width]], axis=1)
        mask = (np.arange(width)[None, :] < z_len[rows, None]) & real[:, None]
        window = min(cache_len, _bucket(int(prompt_len[cols].max()) + width))
        s, m = _score_pairs(
            graphdef, params, cache, jnp.asarray(cols.astype(np.int32)), jnp.asarray(tokens),
            jnp.asarray(prompt_len[cols] - 1), jnp.asarray(mask), window, jnp.float32(temperature),
        )
        s, m = gather_to_host((s, m))
        sums[pairs[real]], means[pairs[real]] = s[real], m[real]
    shape = (num_rows, num_cols)
    return means.reshape(shape), sums.reshape(shape)
