"""The KV cache the decoder reads and writes, and the key mask a query sees through it."""

from __future__ import annotations

from typing import Any

import flax
import jax
import jax.numpy as jnp

from ragen_jax.models.config import ModelConfig


@flax.struct.dataclass
class KVCache:
    """Keys and values, one array per layer; row b's sequence lies in slots 0.. of the slot axis.

    One array per layer, so a step reads and writes each layer's cache where it lies: slicing a layer out of one
    stacked [L, ...] array is a copy on XLA:CPU (the tiny benchmark model's decode step copied its whole cache
    once per step that way). Keys are kept transposed (slots last), values slots-major, so a decode step's two
    products are plain GEMMs per row and key head: scores q [G, hd] @ K^T [hd, S], then probabilities [G, S] @ V
    [S, hd]; with keys slots-major the scores contract both operands' last axis, which XLA:CPU runs as a slower
    kernel at decode shapes (`experiments/bench/profile_steps.py generate`; docs/performance.md, "Decode")."""

    k: tuple[jax.Array, ...]  # per layer [B, num_kv_heads, head_dim, S]
    v: tuple[jax.Array, ...]  # per layer [B, num_kv_heads, S, head_dim]

    @property
    def max_len(self) -> int:
        return self.v[0].shape[2]

    @property
    def batch_size(self) -> int:
        return self.v[0].shape[0]

    def first_slots(self, n: int) -> "KVCache":
        """The cache cut to its first n slots."""
        return KVCache(k=tuple(k[..., :n] for k in self.k), v=tuple(v[:, :, :n] for v in self.v))

    def take_rows(self, rows: jax.Array) -> "KVCache":
        """Rows `rows` [R] of every layer (out-of-range indices clamp, as jnp indexing does)."""
        return KVCache(k=tuple(k[rows] for k in self.k), v=tuple(v[rows] for v in self.v))

    def broadcast_rows(self, b: int) -> "KVCache":
        """A cache of one row as b identical rows (a broadcast, for XLA to fuse into what reads it)."""
        return jax.tree.map(lambda x: jnp.broadcast_to(x, (b,) + x.shape[1:]), self)

    def put_rows(self, rows: jax.Array, part: "KVCache") -> "KVCache":
        """This cache with rows `rows` [R] set to part's rows over part's first part.max_len slots; a row index
        >= B is dropped (padding)."""
        n = part.max_len
        return KVCache(k=tuple(k.at[rows, :, :, :n].set(pk, mode="drop") for k, pk in zip(self.k, part.k)),
                       v=tuple(v.at[rows, :, :n].set(pv, mode="drop") for v, pv in zip(self.v, part.v)))


@flax.struct.dataclass
class KeyMask:
    """Which keys query t of row b sees: slot s <= offset[b] + t and key_valid[b, s]; O(T), never [T, S]."""

    offset: jax.Array | None  # [B] int32 first cache slot written by this call; None without a cache (0)
    key_valid: jax.Array | None  # [B, S] bool over the keys attention reads; None = every one
    query_lengths: jax.Array | None = None  # [B] int32: queries t >= query_lengths[b] are padding (may be skipped)
    window: int | None = flax.struct.field(pytree_node=False, default=None)  # cache slots read (see kv_len)


def init_cache(config: ModelConfig, batch_size: int, max_len: int, dtype: Any = None) -> KVCache:
    """A zero KV cache in the compute dtype by default: per layer, keys [B, num_kv_heads, head_dim, max_len] and
    values [B, num_kv_heads, max_len, head_dim]."""
    rows, layers = (batch_size, config.num_kv_heads), range(config.num_layers)
    dtype = jnp.dtype(dtype) if dtype is not None else config.jnp_dtype
    return KVCache(k=tuple(jnp.zeros(rows + (config.head_dim, max_len), dtype) for _ in layers),
                   v=tuple(jnp.zeros(rows + (max_len, config.head_dim), dtype) for _ in layers))
