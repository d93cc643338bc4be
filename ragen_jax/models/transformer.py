"""Flax NNX decoder-only LMs (Qwen2/2.5, Qwen3, Llama 3.x) with a per-row KV cache, and a value model.

Parameter names mirror Hugging Face's (`model.layers[i].self_attn.q_proj.kernel` is the transposed
`model.layers.i.self_attn.q_proj.weight`) so checkpoint mapping stays a one-liner per tensor.
"""

from __future__ import annotations

from typing import Any

import chex
import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from ragen_jax.models.attention import attention
from ragen_jax.models.decode_attention import ragged_decode_attention, uses_ragged_decode
from ragen_jax.models.linear import Linear, OutFirstLinear, rows_matmul
from ragen_jax.models.cache import KVCache, KeyMask
from ragen_jax.models.config import ModelConfig
from ragen_jax.models.rope import apply_rope, rope_inv_freq, rope_tables
from ragen_jax.models.partitioning import shard_activation

_INIT = nnx.initializers.normal(0.02)


class RMSNorm(nnx.Module):
    """RMSNorm computed in float32, scaled by a learned weight after casting back (as transformers)."""

    def __init__(self, dim: int, eps: float, *, param_dtype: Any):
        self.weight = nnx.Param(jnp.ones((dim,), param_dtype))
        self.eps = eps

    def __call__(self, x: jax.Array) -> jax.Array:
        x32 = x.astype(jnp.float32)
        normed = x32 * jax.lax.rsqrt(jnp.mean(x32 * x32, axis=-1, keepdims=True) + self.eps)
        return self.weight[...].astype(x.dtype) * normed.astype(x.dtype)


def _linear(cfg: ModelConfig, d_in: int, d_out: int, bias: bool, rngs: nnx.Rngs) -> Linear:
    return Linear(
        d_in, d_out, use_bias=bias, dtype=cfg.jnp_dtype, param_dtype=cfg.jnp_param_dtype,
        kernel_init=_INIT, rngs=rngs,
    )


class Attention(nnx.Module):
    """Grouped-query self-attention with RoPE, optional q/k/v bias (Qwen2; `attention_bias` Llama/Qwen3 also bias
    o_proj) and q/k RMSNorm (Qwen3)."""

    def __init__(self, cfg: ModelConfig, *, rngs: nnx.Rngs):
        d, h, kv, hd = cfg.hidden_size, cfg.num_heads, cfg.num_kv_heads, cfg.head_dim
        self.q_proj = _linear(cfg, d, h * hd, cfg.attention_bias, rngs)
        self.k_proj = _linear(cfg, d, kv * hd, cfg.attention_bias, rngs)
        self.v_proj = _linear(cfg, d, kv * hd, cfg.attention_bias, rngs)
        self.o_proj = _linear(cfg, h * hd, d, cfg.o_proj_bias, rngs)
        if cfg.qk_norm:
            self.q_norm = RMSNorm(hd, cfg.rms_norm_eps, param_dtype=cfg.jnp_param_dtype)
            self.k_norm = RMSNorm(hd, cfg.rms_norm_eps, param_dtype=cfg.jnp_param_dtype)
        self.num_heads, self.num_kv_heads, self.head_dim = h, kv, hd
        self.qk_norm = cfg.qk_norm

    def __call__(self, x, cos, sin, mask: KeyMask, cache, cache_index, select=None):
        """x [B, T, D], RoPE tables cos/sin [B, T, 1, hd] (`rope_tables`), cache: this layer's (k, v) as KVCache
        holds them, or None -> (out [B, T, D], new (k, v)). select [B, N] int32 (optional): every token's key and
        value are made (and cached), but only queries select[b, :] of row b attend (out [B, N, D])."""
        b, t, _ = x.shape
        q = shard_activation(self.q_proj(x).reshape(b, t, self.num_heads, self.head_dim), 2)
        k = shard_activation(self.k_proj(x).reshape(b, t, self.num_kv_heads, self.head_dim), 2)
        v = shard_activation(self.v_proj(x).reshape(b, t, self.num_kv_heads, self.head_dim), 2)
        if self.qk_norm:
            q, k = self.q_norm(q), self.k_norm(k)
        q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        query_positions = None
        if select is not None:  # N queries per row at their own slots
            q = jnp.take_along_axis(q, select[:, :, None, None], axis=1)
            query_positions = select if mask.offset is None else mask.offset[:, None] + select
            mask = mask.replace(offset=None, query_lengths=None)
        new_cache = None
        if cache is not None:  # write this chunk into slots cache_index[b] + t
            ck, cv = cache
            rows = jnp.arange(b)[:, None]
            slots = cache_index[:, None] + jnp.arange(t)[None, :]
            ck = ck.at[rows, :, :, slots].set(k.astype(ck.dtype), mode="drop")  # k [B, T, K, hd]
            cv = cv.at[rows, :, slots].set(v.astype(cv.dtype), mode="drop")
            new_cache = (ck, cv)
            # a prefill's kept query reads the window densely: O(S) next to the prefill's O(T S), no loop to compile
            if select is None and _ragged_decode(t, mask):
                out = ragged_decode_attention(q, ck, cv, mask.offset + 1)  # each row reads its own length
            else:  # attend over the first `window` slots only (see `kv_len`)
                k, v = ck[..., :mask.window].astype(q.dtype), cv[:, :, :mask.window].astype(q.dtype)
                out = attention(q, k, v, offset=mask.offset, key_valid=mask.key_valid,
                                query_lengths=mask.query_lengths, query_positions=query_positions, cache_layout=True)
        else:
            out = attention(q, k, v, offset=mask.offset, key_valid=mask.key_valid, query_lengths=mask.query_lengths,
                            query_positions=query_positions)
        out = out.reshape(b, q.shape[1], self.num_heads * self.head_dim)
        return self.o_proj(shard_activation(out, 2)), new_cache


class MLP(nnx.Module):
    """SwiGLU feed-forward: down(silu(gate(x)) * up(x))."""

    def __init__(self, cfg: ModelConfig, *, rngs: nnx.Rngs):
        self.gate_proj = _linear(cfg, cfg.hidden_size, cfg.intermediate_size, False, rngs)
        self.up_proj = _linear(cfg, cfg.hidden_size, cfg.intermediate_size, False, rngs)
        self.down_proj = _linear(cfg, cfg.intermediate_size, cfg.hidden_size, False, rngs)

    def __call__(self, x: jax.Array) -> jax.Array:
        return self.down_proj(shard_activation(jax.nn.silu(self.gate_proj(x)) * self.up_proj(x), 2))


class DecoderLayer(nnx.Module):
    """Pre-norm transformer block: x + attn(norm(x)); x + mlp(norm(x))."""

    def __init__(self, cfg: ModelConfig, *, rngs: nnx.Rngs):
        pdt = cfg.jnp_param_dtype
        self.input_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps, param_dtype=pdt)
        self.self_attn = Attention(cfg, rngs=rngs)
        self.post_attention_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps, param_dtype=pdt)
        self.mlp = MLP(cfg, rngs=rngs)

    def __call__(self, x, cos, sin, mask, cache, cache_index, select=None):
        """x [B, T, D], RoPE tables cos/sin [B, T, 1, hd], cache: this layer's (k, v) or None -> (x [B, T, D], new
        (k, v)); with select [B, N] int32 only tokens select[b, :] of row b go on past attention (x [B, N, D]),
        every token's key and value still made."""
        attn, new_cache = self.self_attn(self.input_layernorm(x), cos, sin, mask, cache, cache_index, select)
        if select is not None:
            x = jnp.take_along_axis(x, select[:, :, None], axis=1)
        x = x + attn
        x = x + self.mlp(self.post_attention_layernorm(x))
        return x, new_cache


def _remat_policy(name: str):
    return {"full": None, "dots": jax.checkpoint_policies.checkpoint_dots}[name]


def _ragged_decode(t: int, mask: KeyMask) -> bool:
    """Whether a cache step reads each row's own length rather than a shared window (`uses_ragged_decode`): one
    query per row and no slot mask."""
    mesh = jax.sharding.get_abstract_mesh()
    return t == 1 and mask.key_valid is None and uses_ragged_decode(1 if mesh.empty else mesh.size)


def _key_mask(attention_mask, cache, cache_index, window: int | None = None, query_lengths=None) -> KeyMask:
    """Which keys each query sees; with a cache attention reads the first `window` slots (default: every slot)."""
    if cache is None:
        return KeyMask(offset=None, key_valid=None if attention_mask is None else attention_mask.astype(bool),
                       query_lengths=query_lengths)
    window = cache.max_len if window is None else window
    valid = None if attention_mask is None else attention_mask.astype(bool)[:, :window]
    return KeyMask(offset=cache_index.astype(jnp.int32), key_valid=valid, window=window, query_lengths=query_lengths)


def _outside_window(cache_index, t: int, window: int, query_lengths=None, at=None) -> jax.Array:
    """[B, N] bool: which of the tokens (every t < T, or those `at` [B, N]) are real (t < query_lengths[b]) yet
    sit at a slot cache_index[b] + t outside [0, window): attention cannot see their own keys (a write past the
    cache is dropped), so their outputs would be silently wrong."""
    idx = jnp.arange(t, dtype=jnp.int32)[None, :] if at is None else at
    slot = cache_index.astype(jnp.int32)[:, None] + idx
    outside = (slot < 0) | (slot >= window)
    return outside if query_lengths is None else outside & (idx < query_lengths.astype(jnp.int32)[:, None])


def _check_slots(cache_index, t: int, window: int, query_lengths=None) -> None:
    """Raises where cache_index (and query_lengths) are concrete (a call outside jit) and a row's real tokens,
    slots cache_index[b] .. cache_index[b] + n - 1, do not lie within [0, window); traced, `_outside_window`
    makes those tokens' outputs NaN instead."""
    if any(isinstance(x, jax.core.Tracer) for x in (cache_index, query_lengths)):
        return
    index = np.asarray(cache_index, np.int64)
    n = np.full(index.shape, t) if query_lengths is None else np.clip(np.asarray(query_lengths), 0, t)
    bad = np.flatnonzero((n > 0) & ((index < 0) | (index + n > window)))
    if bad.size:
        r = bad[0]
        raise ValueError(f"Row {r} writes {n[r]} tokens from cache_index {index[r]}: slots {index[r]}.."
                         f"{index[r] + n[r] - 1} must lie in [0, {window}) (cache.max_len, or kv_len); use a larger "
                         "cache or kv_len, or a cache_index >= 0 that leaves room for the tokens.")


class Decoder(nnx.Module):
    """Embedding, decoder layers and final norm: the backbone shared by CausalLM and ValueModel."""

    def __init__(self, cfg: ModelConfig, *, rngs: nnx.Rngs):
        self.config = cfg
        self.embed_tokens = nnx.Embed(
            cfg.vocab_size, cfg.hidden_size, dtype=cfg.jnp_dtype, param_dtype=cfg.jnp_param_dtype,
            embedding_init=_INIT, rngs=rngs,
        )
        self.layers = nnx.List([DecoderLayer(cfg, rngs=rngs) for _ in range(cfg.num_layers)])
        self.norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps, param_dtype=cfg.jnp_param_dtype)

    def __call__(self, tokens, positions, *, attention_mask=None, cache=None, cache_index=None, kv_len=None,
                 query_lengths=None, hidden_at=None, embeds=None, rope=None):
        """tokens/positions [B, T] -> (hidden [B, T, D] after the final norm, new KVCache | None); with
        hidden_at [B] or [B, N] int32, hidden [B, 1, D] or [B, N, D] of those tokens only (see CausalLM.hidden).
        A multimodal model passes embeds [B, T, D] (the inputs, image features in place of their placeholder tokens'
        embeddings) and rope, the (cos, sin) tables [B, T, 1, hd] of its own positions (`rope_tables`' layout)."""
        chex.assert_rank([tokens, positions], 2)
        chex.assert_equal_shape([tokens, positions])
        b, t = tokens.shape
        if embeds is not None:
            chex.assert_shape(embeds, (b, t, self.config.hidden_size))
        if rope is not None:
            chex.assert_shape(list(rope), (b, t, 1, self.config.head_dim))
        if (cache is None) != (cache_index is None):
            raise ValueError("Pass cache and cache_index together (cache_index [B] int32: first free slot per row).")
        if cache is not None:
            chex.assert_shape(cache_index, (b,))
            if attention_mask is not None:
                chex.assert_shape(attention_mask, (b, cache.max_len))
            if kv_len is not None and not 0 < kv_len <= cache.max_len:
                raise ValueError(f"kv_len must lie in [1, cache.max_len={cache.max_len}], got {kv_len}.")
            window = cache.max_len if kv_len is None else kv_len
            if query_lengths is None and t > window:  # every token is real: those past the window lose their keys
                raise ValueError(f"A chunk of {t} tokens cannot fit in {window} cache slots (cache.max_len or "
                                 "kv_len); use a larger cache, or pass query_lengths if the tail is padding.")
            _check_slots(cache_index, t, window, query_lengths)
        elif attention_mask is not None:
            chex.assert_shape(attention_mask, (b, t))
        if query_lengths is not None:
            chex.assert_shape(query_lengths, (b,))
        if hidden_at is not None:
            chex.assert_rank(hidden_at, {1, 2})
            hidden_at = hidden_at.astype(jnp.int32).reshape(b, -1)
        mask = _key_mask(attention_mask, cache, cache_index, kv_len, query_lengths)
        x = shard_activation(self.embed_tokens(tokens) if embeds is None else embeds.astype(self.config.jnp_dtype))
        cos, sin = rope_tables(positions, rope_inv_freq(self.config), x.dtype) if rope is None else rope
        call = DecoderLayer.__call__
        if self.config.remat != "none" and cache is None:  # remat helps training; decoding has no backward
            call = nnx.remat(call, policy=_remat_policy(self.config.remat))
        last = len(self.layers) - 1
        new_k, new_v = [], []
        for i, layer in enumerate(self.layers):
            kv = None if cache is None else (cache.k[i], cache.v[i])
            x, kv = call(layer, x, cos, sin, mask, kv, cache_index, hidden_at if i == last else None)
            x = shard_activation(x)
            if kv is not None:
                new_k.append(kv[0])
                new_v.append(kv[1])
        if cache is None:
            return self.norm(x), None
        outside = _outside_window(cache_index, t, mask.window, query_lengths, hidden_at)  # [B, N]: traced overflow
        return jnp.where(outside[..., None], jnp.nan, self.norm(x)), KVCache(k=tuple(new_k), v=tuple(new_v))


class CausalLM(nnx.Module):
    """Decoder-only language model; `__call__` gives float32 logits and the updated cache."""

    def __init__(self, config: ModelConfig, *, rngs: nnx.Rngs):
        self.config = config
        self.model = Decoder(config, rngs=rngs)
        if not config.tie_word_embeddings:
            self.lm_head = _linear(config, config.hidden_size, config.vocab_size, False, rngs)

    def hidden(self, tokens, positions, *, attention_mask=None, cache=None, cache_index=None, kv_len=None,
               query_lengths=None, hidden_at=None):
        """tokens/positions [B, T] int32 -> (hidden [B, T, D] after the final norm, new_cache | None).

        attention_mask: [B, T] bool without a cache (False = padding key); with a cache, optionally
        [B, S] over cache slots. With a cache, row b's tokens go to slots cache_index[b]...; `kv_len`
        (static, optional) limits attention to the first kv_len slots, which must hold every token the
        queries see: decoding then reads a window of the cache, not all of it. A real token whose slot lies
        outside [0, kv_len or S) raises where cache_index is concrete and gets a NaN hidden state under jit
        (its own key is dropped or unread: its output would be silently wrong). query_lengths [B] int32
        (optional): tokens t >= query_lengths[b] are padding whose hidden states are unspecified, so
        attention may skip them (a prefill bucket's tail). hidden_at [B] or [B, N] int32 (optional): only
        tokens hidden_at[b, ...] of row b are wanted, hidden is [B, 1, D] or [B, N, D]; the last layer then
        attends and runs its MLP for those tokens alone (a prefill that samples from its last token, an update
        scoring its trained positions), every token's keys and values still made (and written to the cache).
        """
        return self.model(tokens, positions, attention_mask=attention_mask, cache=cache, cache_index=cache_index,
                          kv_len=kv_len, query_lengths=query_lengths, hidden_at=hidden_at)

    def lm_head_matrix(self) -> jax.Array:
        """Output projection [D, V] (the tied embedding transposed when tied)."""
        if self.config.tie_word_embeddings:
            return self.model.embed_tokens.embedding[...].T
        return self.lm_head.kernel[...]

    def logits(self, hidden: jax.Array) -> jax.Array:
        """hidden [B, T, D] -> logits [B, T, V] float32 (compute-dtype inputs, float32 accumulation)."""
        h = hidden.astype(self.config.jnp_dtype)
        head = getattr(self, "lm_head", None)
        if isinstance(head, OutFirstLinear):  # laid out for decoding (`with_decode_weights`)
            return shard_activation(head(h, preferred_element_type=jnp.float32), 2)
        tied = self.config.tie_word_embeddings  # a tied head contracts the embedding's D axis: no transposed copy
        w = (self.model.embed_tokens.embedding if tied else self.lm_head.kernel)[...].astype(h.dtype)
        return shard_activation(rows_matmul(h, w, w_out_first=tied, preferred_element_type=jnp.float32), 2)

    def __call__(self, tokens, positions, *, attention_mask=None, cache=None, cache_index=None, kv_len=None,
                 query_lengths=None):
        """-> (logits [B, T, V] float32, new_cache | None)."""
        h, new_cache = self.hidden(tokens, positions, attention_mask=attention_mask, cache=cache,
                                   cache_index=cache_index, kv_len=kv_len, query_lengths=query_lengths)
        return self.logits(h), new_cache


PROJECTIONS = {"self_attn": ("q_proj", "k_proj", "v_proj", "o_proj"),
               "mlp": ("gate_proj", "up_proj", "down_proj")}


def _projections(model: CausalLM):
    """(name, parent module, attribute) of every decoder-layer projection."""
    for i, layer in enumerate(model.model.layers):
        for block_name, names in PROJECTIONS.items():
            block = getattr(layer, block_name)
            for name in names:
                yield f"{i}.{block_name}.{name}", block, name


DECODE_WEIGHTS_MIN_BYTES = 128 * 2**20


def projection_params(config: ModelConfig) -> int:
    """Weights of every decoder projection and of an untied output head: what `decode_weights` holds."""
    d, q, kv = config.hidden_size, config.num_heads * config.head_dim, config.num_kv_heads * config.head_dim
    per_layer = 2 * d * q + 2 * d * kv + 3 * d * config.intermediate_size
    return config.num_layers * per_layer + (0 if config.tie_word_embeddings else d * config.vocab_size)


def decode_weights_pay_off(config: ModelConfig, platform: str) -> bool:
    """Whether decoding on `decode_weights` is faster: on a CPU, once the projections stream from memory every
    step (>= 128 MiB in the compute dtype). Below that the weights stay in cache, the layout gains nothing and the
    transposed activations cost more than they save (`experiments/bench/bench_decode_layout.py`; docs/performance.md,
    "Decode")."""
    return platform == "cpu" and projection_params(config) * config.jnp_dtype.itemsize >= DECODE_WEIGHTS_MIN_BYTES


def decode_weights(model: CausalLM) -> dict[str, jax.Array]:
    """Every projection's weight transposed to [out, in] in its compute dtype (LoRA adapters merged in), by
    name ("3.mlp.gate_proj"; "lm_head" for an untied head; a tied head uses the embedding, laid out [V, D]
    already). The decode loop's few-row GEMMs read these rows contiguously (`with_decode_weights`)."""
    weights = {}
    for key, block, name in _projections(model):
        linear = getattr(block, name)
        kernel = linear.merged_kernel() if hasattr(linear, "merged_kernel") else linear.kernel[...]
        weights[key] = kernel.astype(model.config.jnp_dtype).T
    if not model.config.tie_word_embeddings:
        weights["lm_head"] = model.lm_head.kernel[...].astype(model.config.jnp_dtype).T
    return weights


def with_decode_weights(model: CausalLM, weights: dict[str, jax.Array]) -> CausalLM:
    """Swaps every projection and the output head for an `OutFirstLinear` over `decode_weights(model)`, in place
    (for a model merged inside a traced decode program); returns the model. Same function, other rounding: the
    sums run in another order. On a CPU a decode step whose weights stream from memory reads them faster this way
    (`experiments/bench/bench_decode_layout.py`)."""
    dtype = model.config.jnp_dtype
    for key, block, name in _projections(model):
        bias = getattr(getattr(block, name), "bias", None)
        setattr(block, name, OutFirstLinear(weights[key], None if bias is None or bias[...] is None
                                            else bias[...].astype(dtype)))
    if model.config.tie_word_embeddings:
        model.lm_head = OutFirstLinear(model.model.embed_tokens.embedding[...].astype(dtype), None)
    else:
        model.lm_head = OutFirstLinear(weights["lm_head"], None)
    return model


class ValueModel(nnx.Module):
    """PPO critic: the causal LM backbone and a Linear(D -> 1) head giving one value per token."""

    HEAD = "score"  # the head's attribute: trained whole when the backbone trains LoRA adapters

    def __init__(self, config: ModelConfig, *, rngs: nnx.Rngs):
        self.config = config
        self.model = Decoder(config, rngs=rngs)
        self.score = Linear(
            config.hidden_size, 1, use_bias=True, dtype=jnp.float32, param_dtype=jnp.float32,
            kernel_init=_INIT, rngs=rngs,
        )

    def __call__(self, tokens, positions, *, attention_mask=None) -> jax.Array:
        """tokens/positions [B, T] -> values [B, T] float32."""
        h, _ = self.model(tokens, positions, attention_mask=attention_mask)
        return self.score(h.astype(jnp.float32))[..., 0]

    @classmethod
    def from_causal_lm(cls, lm: CausalLM, *, rngs: nnx.Rngs, keep_lora: bool = False) -> "ValueModel":
        """A critic whose backbone is a copy of lm's (value head freshly initialised). lm's LoRA adapters are
        merged into it, or with `keep_lora` copied as adapters of the critic's own over lm's base weights (a
        LoRA critic, as veRL's with lora_rank > 0)."""
        from ragen_jax.models.lora import has_lora, merge_lora

        if keep_lora and not has_lora(lm):
            raise ValueError("keep_lora=True needs a model with LoRA adapters (apply_lora first).")
        if has_lora(lm) and not keep_lora:
            lm = merge_lora(lm)
        critic = cls(lm.config, rngs=rngs)
        if keep_lora:
            _mirror_lora(critic, lm)
        nnx.update(critic.model, jax.tree.map(jnp.copy, nnx.state(lm.model)))
        return critic


def _mirror_lora(critic: "ValueModel", lm: CausalLM) -> None:
    """Wrap the critic's Linear layers where lm's are LoRA-wrapped, with lm's rank and scale (weights copied after)."""
    from ragen_jax.models.lora import LoRALinear

    for mine, theirs in zip(critic.model.layers, lm.model.layers):
        for block in ("self_attn", "mlp"):
            for name, layer in vars(getattr(theirs, block)).items():
                if isinstance(layer, LoRALinear):
                    base = getattr(getattr(mine, block), name)
                    rank = layer.lora_a.shape[1]
                    setattr(getattr(mine, block), name, LoRALinear(base, rank, layer.scale * rank,
                                                                   rngs=nnx.Rngs(0)))
