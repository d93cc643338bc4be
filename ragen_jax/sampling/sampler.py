"""Batched generation over a per-row KV cache: a jitted prefill of the new tokens, then a jitted
`lax.while_loop` decode. Both take the split model state, donate the cache and are compiled once per
(prompt-length bucket) and per SamplingConfig respectively.

Given a mesh, the cache and every batch input live on it with rows over (data, fsdp), and each process
feeds and reads only its own rows (`Sampler.rows`): the same code runs on one CPU and across hosts.
"""

from __future__ import annotations

import functools
import logging
from typing import Any

import flax
import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from ragen_jax.models import KVCache, ModelConfig, init_cache
from ragen_jax.sampling.buckets import bucket_length
from ragen_jax.sampling.config import SamplingConfig
from ragen_jax.sampling.filters import sample_step
from ragen_jax.sampling.stopping import INACTIVE, stop_reason
from ragen_jax.sharding.distributed import agree_max
from ragen_jax.sharding.placement import process_rows, rows_to_global
from ragen_jax.sharding.rules import cache_spec, fit_spec

log = logging.getLogger(__name__)
MIN_WINDOW = 256  # smallest attention window over the cache (fewer programs for short contexts)


@flax.struct.dataclass
class SampleOutput:
    """What one `Sampler.generate` call produced; see `Sampler.generate` for the cache semantics."""

    tokens: jax.Array  # [B, N] int32, pad_id after each row's length
    lengths: jax.Array  # [B] int32, 0 for inactive rows; includes the eos/stop tokens
    logprobs: jax.Array  # [B, N] f32 under the sampling distribution; 0 past length
    raw_logprobs: jax.Array  # [B, N] f32 under the raw model (temperature 1, full vocab); 0 past length
    finish_reason: jax.Array  # [B] int32: 0 length cap, 1 eos, 2 stop sequence, -1 inactive
    cache: KVCache
    cache_lens: jax.Array  # [B] int32 tokens of each row whose K/V are in the cache


@flax.struct.dataclass
class _LoopState:
    step: jax.Array  # [] int32: index of the token sampled next
    cache: KVCache
    tokens: jax.Array  # [B, N]
    logprobs: jax.Array  # [B, N]
    raw_logprobs: jax.Array  # [B, N]
    last: jax.Array  # [B] last sampled token, fed at the next step
    lengths: jax.Array  # [B]
    done: jax.Array  # [B] bool
    reason: jax.Array  # [B]


def model_config_of(graphdef: Any) -> ModelConfig:
    """The ModelConfig stored as a static attribute in a CausalLM's graphdef."""
    for _, value in getattr(graphdef, "attributes", ()):
        config = getattr(value, "value", None)
        if isinstance(config, ModelConfig):
            return config
    raise ValueError("Could not find a ModelConfig in the graphdef; pass Sampler(..., model_config=...).")


def _prefill(graphdef, kv_len: int, params, cache, tokens, cache_index, last_index):
    """Writes tokens [B, Tb] into the cache from cache_index [B]; -> (cache, hidden at last_index [B, D] f32).

    Attention reads the first kv_len cache slots (every real token lies there)."""
    model = nnx.merge(graphdef, params)
    positions = cache_index[:, None] + jnp.arange(tokens.shape[1], dtype=jnp.int32)[None, :]
    hidden, cache = model.hidden(tokens, positions, cache=cache, cache_index=cache_index, kv_len=kv_len)
    last = jnp.take_along_axis(hidden, last_index[:, None, None], axis=1)[:, 0]
    return cache, last.astype(jnp.float32)


def _column(x: jax.Array, value: jax.Array, step: jax.Array) -> jax.Array:
    return jax.lax.dynamic_update_slice_in_dim(x, value[:, None].astype(x.dtype), step, axis=1)


def _decode(graphdef, config: SamplingConfig, pad_id: int, kv_len: int, params, cache, hidden, base, active, key):
    """Samples up to config.max_new_tokens per row in a while_loop that stops once every row is done.

    Each step attends over the first kv_len cache slots only, which hold every row's tokens to the end."""
    model = nnx.merge(graphdef, params)
    batch, n = base.shape[0], config.max_new_tokens
    logits = model.logits(hidden[:, None, :].astype(model.config.jnp_dtype))[:, 0]
    tok, lp, raw = sample_step(jax.random.fold_in(key, 0), logits, config)
    zeros = jnp.zeros((batch, n), jnp.float32)
    tokens = _column(jnp.full((batch, n), pad_id, jnp.int32), jnp.where(active, tok, pad_id), 0)
    why = stop_reason(tokens, jnp.int32(0), tok, config)
    state = _LoopState(
        step=jnp.int32(1),
        cache=cache,
        tokens=tokens,
        logprobs=_column(zeros, jnp.where(active, lp, 0.0), 0),
        raw_logprobs=_column(zeros, jnp.where(active, raw, 0.0), 0),
        last=tok,
        lengths=active.astype(jnp.int32),
        done=~active | (why > 0),
        reason=jnp.where(active, why, INACTIVE).astype(jnp.int32),
    )

    def cond(s: _LoopState) -> jax.Array:
        return (s.step < n) & ~jnp.all(s.done)

    def body(s: _LoopState) -> _LoopState:
        # Row b feeds its last token into slot base + length - 1; finished rows rewrite a slot past their end.
        index = base + jnp.maximum(s.lengths - 1, 0)
        logits, cache = model(s.last[:, None], index[:, None], cache=s.cache, cache_index=index, kv_len=kv_len)
        tok, lp, raw = sample_step(jax.random.fold_in(key, s.step), logits[:, 0], config)
        live = ~s.done
        tokens = _column(s.tokens, jnp.where(live, tok, pad_id), s.step)
        why = jnp.where(live, stop_reason(tokens, s.step, tok, config), 0)
        return _LoopState(
            step=s.step + 1,
            cache=cache,
            tokens=tokens,
            logprobs=_column(s.logprobs, jnp.where(live, lp, 0.0), s.step),
            raw_logprobs=_column(s.raw_logprobs, jnp.where(live, raw, 0.0), s.step),
            last=jnp.where(live, tok, s.last),
            lengths=s.lengths + live.astype(jnp.int32),
            done=s.done | (why > 0),
            reason=jnp.where(why > 0, why, s.reason),
        )

    s = jax.lax.while_loop(cond, body, state)
    return SampleOutput(
        tokens=s.tokens,
        lengths=s.lengths,
        logprobs=s.logprobs,
        raw_logprobs=s.raw_logprobs,
        finish_reason=s.reason,
        cache=s.cache,
        cache_lens=base + jnp.maximum(s.lengths - 1, 0),
    )


class Sampler:
    """Compiled batched generation for one model graph, (global) batch size and cache size.

    `generate` consumes (donates) the cache it is given; use the one in its output for the next turn.
    With a `mesh`, row inputs are this process's rows `self.rows` of the batch, and outputs span the batch
    (read this process's rows with `ragen_jax.sharding.global_to_local_rows(x, sampler.rows)`).
    With `kv_window` (default), attention reads only the first `window_length(...)` cache slots, a power
    of two >= the longest row's end, instead of all `cache_size` slots.
    """

    def __init__(self, graphdef, *, cache_size: int, pad_id: int, batch_size: int, dtype=None,
                 model_config: ModelConfig | None = None, mesh: jax.sharding.Mesh | None = None,
                 kv_window: bool = True):
        if cache_size < 1 or batch_size < 1:
            raise ValueError(f"cache_size and batch_size must be >= 1, got {cache_size} and {batch_size}.")
        self.graphdef = graphdef
        self.model_config = model_config or model_config_of(graphdef)
        self.cache_size, self.pad_id, self.batch_size, self.dtype = cache_size, int(pad_id), batch_size, dtype
        self.mesh = mesh
        self.kv_window = kv_window
        self.rows = process_rows(mesh, batch_size)
        self._programs: dict[tuple, Any] = {}

    @property
    def local_batch_size(self) -> int:
        """How many rows this process feeds and reads (the whole batch with one process)."""
        return self.rows.stop - self.rows.start

    def to_global(self, local: Any) -> jax.Array:
        """This process's rows [local_batch_size, ...] -> the batch-wide array the programs take."""
        if self.mesh is None:
            return jnp.asarray(local)
        return rows_to_global(local, self.mesh, self.batch_size)

    @property
    def num_programs(self) -> int:
        """How many distinct programs (prefill: bucket x window; decode: sampling config x window) it compiled."""
        return len(self._programs)

    def init_cache(self) -> tuple[KVCache, np.ndarray]:
        """An empty cache [L, B, cache_size, kv_heads, head_dim] (rows over the mesh's (data, fsdp), kv heads
        over tensor) and this process's cache_lens, zeros [local_batch_size]."""
        make = functools.partial(init_cache, self.model_config, self.batch_size, self.cache_size, self.dtype)
        lens = np.zeros((self.local_batch_size,), np.int32)
        if self.mesh is None:
            return make(), lens
        shardings = jax.tree.map(
            lambda a: jax.sharding.NamedSharding(self.mesh, fit_spec(cache_spec(), a.shape, self.mesh)),
            jax.eval_shape(make))
        return jax.jit(make, out_shardings=shardings)(), lens

    def _program(self, key: tuple, build):
        fn = self._programs.get(key)
        if fn is None:
            log.debug("sampler: compiling %s (batch %d, cache %d); %d programs so far",
                     key, self.batch_size, self.cache_size, len(self._programs) + 1)
            fn = self._programs[key] = build()
        return fn

    def window_length(self, end: int) -> int:
        """Cache slots attention reads when the longest row ends at slot `end`: a power of two (>= 256)
        capped at cache_size, so a run compiles a few windows; cache_size without `kv_window`."""
        return min(self.cache_size, bucket_length(end, minimum=MIN_WINDOW)) if self.kv_window else self.cache_size

    def _prefill_fn(self, bucket: int, kv_len: int):
        build = lambda: jax.jit(functools.partial(_prefill, self.graphdef, kv_len), donate_argnums=(1,))
        return self._program(("prefill", bucket, kv_len), build)

    def _decode_fn(self, config: SamplingConfig, kv_len: int):
        build = lambda: jax.jit(functools.partial(_decode, self.graphdef, config, self.pad_id, kv_len),
                                donate_argnums=(1,))
        return self._program(("decode", config, kv_len), build)

    def _check(self, new_tokens, new_lens, cache_lens, active, config: SamplingConfig) -> None:
        b = self.local_batch_size
        if new_tokens.ndim != 2 or new_tokens.shape[0] != b:
            rows = f"batch_size={b}" if b == self.batch_size else f"local_batch_size={b} (this process's rows)"
            raise ValueError(f"new_tokens must be [{rows}, T] int32, got shape {new_tokens.shape}.")
        for name, x in (("new_lens", new_lens), ("cache_lens", cache_lens), ("active", active)):
            if x.shape != (b,):
                raise ValueError(f"{name} must have shape [{b}], got {x.shape}.")
        if np.any(new_lens < 0) or np.any(new_lens > new_tokens.shape[1]):
            raise ValueError(f"new_lens must lie in [0, {new_tokens.shape[1]}] (new_tokens' width), got {new_lens}.")
        if np.any(cache_lens < 0):
            raise ValueError(f"cache_lens must be >= 0, got {cache_lens}.")
        empty = np.flatnonzero(active & (new_lens == 0))
        if empty.size:
            raise ValueError(
                f"Row {empty[0]} is active but has new_lens 0: feed at least one token (the last sampled "
                "token of the previous call) or mark the row inactive."
            )
        need = cache_lens + new_lens + config.max_new_tokens
        over = np.flatnonzero(active & (need > self.cache_size))
        if over.size:
            r = over[0]
            raise ValueError(
                f"Row {r} would overflow the KV cache by {need[r] - self.cache_size} tokens: cache_lens "
                f"{cache_lens[r]} + new_lens {new_lens[r]} + max_new_tokens {config.max_new_tokens} > "
                f"cache_size {self.cache_size}. Raise Sampler(cache_size=...) or lower max_new_tokens."
            )

    def generate(self, params, new_tokens, new_lens, key, config: SamplingConfig, *,
                 cache: KVCache | None = None, cache_lens=None, active=None) -> SampleOutput:
        """Appends new_tokens[b, :new_lens[b]] to row b's cached sequence and samples a continuation.

        new_tokens [b, Tn] int32 (right-padded); cache_lens/active [b], where b = local_batch_size (this
        process's rows; the whole batch with one process). Every process calls with its rows; the output's
        arrays span the batch. The output cache holds every token except the last
        sampled one of each row, which the caller feeds first on the next call.
        """
        if (cache is None) != (cache_lens is None):
            raise ValueError("Pass cache and cache_lens together (both from Sampler.init_cache or a SampleOutput).")
        if cache is None:
            cache, cache_lens = self.init_cache()
        if cache.k.shape[1:3] != (self.batch_size, self.cache_size):
            raise ValueError(f"cache has [B, S] = {cache.k.shape[1:3]}, this sampler expects "
                             f"{(self.batch_size, self.cache_size)}; create it with Sampler.init_cache().")
        tokens_np = np.asarray(new_tokens, dtype=np.int32)
        lens_np = np.asarray(new_lens, dtype=np.int32)
        cache_lens_np = np.asarray(cache_lens, dtype=np.int32)
        active_np = np.ones((self.local_batch_size,), bool) if active is None else np.asarray(active, dtype=bool)
        self._check(tokens_np, lens_np, cache_lens_np, active_np, config)

        lens_np = np.where(active_np, lens_np, 0)
        # all processes agree (one collective) on the shapes, so they compile and run the same programs
        longest_new, last_end = agree_max(lens_np.max(), np.max(np.where(active_np, cache_lens_np + lens_np, 0)))
        bucket = bucket_length(longest_new)
        kv_len = self.window_length(last_end + config.max_new_tokens)
        padded = np.full((self.local_batch_size, bucket), self.pad_id, np.int32)
        width = min(bucket, tokens_np.shape[1])
        padded[:, :width] = tokens_np[:, :width]
        put = self.to_global
        cache, hidden = self._prefill_fn(bucket, kv_len)(
            params, cache, put(padded), put(cache_lens_np), put(np.maximum(lens_np - 1, 0))
        )
        return self._decode_fn(config, kv_len)(params, cache, hidden, put(cache_lens_np + lens_np), put(active_np),
                                               key)
