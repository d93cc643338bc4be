"""Qwen2.5-VL's vision tower in Flax NNX: patch embedding, blocks of window or full attention with a 2-D rotary
embedding, and the patch merger that turns each merge_size x merge_size block of patches into one language-model
token. Parameter names mirror transformers' (`visual.blocks.3.attn.qkv.weight` is `blocks[3].attn.qkv.kernel`).
"""

from __future__ import annotations

import math
from typing import Any

import chex
import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from ragen_jax.models.linear import Linear
from ragen_jax.models.rope import apply_rope
from ragen_jax.models.transformer import RMSNorm
from ragen_jax.models.vision.config import VisionConfig
from ragen_jax.models.vision.layout import VisionInputs

_INIT = nnx.initializers.normal(0.02)
_NEG = float(np.finfo(np.float32).min)


def _linear(d_in: int, d_out: int, dtype: Any, param_dtype: Any, rngs: nnx.Rngs) -> Linear:
    return Linear(d_in, d_out, use_bias=True, dtype=dtype, param_dtype=param_dtype, kernel_init=_INIT, rngs=rngs)


class PatchConv(nnx.Module):
    """transformers' Conv3d with kernel = stride = (temporal_patch, patch, patch) applied to one patch at a time: a
    product of each flattened patch [F] with the kernel. The weight keeps the Conv3d layout [E, C, T, P, P]."""

    def __init__(self, config: VisionConfig, *, dtype: Any, param_dtype: Any, rngs: nnx.Rngs):
        shape = (config.hidden_size, config.in_channels, config.temporal_patch_size, config.patch_size,
                 config.patch_size)
        self.weight = nnx.Param(_INIT(rngs.params(), shape, param_dtype))
        self.dtype = dtype

    def __call__(self, pixels: jax.Array) -> jax.Array:
        """pixels [..., F] (the processor's C x T x P x P order) -> [..., E]."""
        w = self.weight[...].reshape(self.weight.shape[0], -1).astype(self.dtype)
        return jnp.einsum("...f,ef->...e", pixels.astype(self.dtype), w)


class PatchEmbed(nnx.Module):
    """The patch embedding, its convolution under transformers' name (`patch_embed.proj.weight`)."""

    def __init__(self, config: VisionConfig, *, dtype: Any, param_dtype: Any, rngs: nnx.Rngs):
        self.proj = PatchConv(config, dtype=dtype, param_dtype=param_dtype, rngs=rngs)

    def __call__(self, pixels: jax.Array) -> jax.Array:
        return self.proj(pixels)


def vision_rope_tables(positions: jax.Array, config: VisionConfig) -> tuple[jax.Array, jax.Array]:
    """(cos, sin) [G, P, 1, hd] float32 for patch positions [G, P, 2]: the row drives the first quarter of the
    frequencies and the column the second (transformers' axial rotary embedding), each half repeated."""
    quarter = config.head_dim // 2
    inv = 1.0 / (np.float32(config.rope_theta) ** (np.arange(0, quarter, 2, dtype=np.float32) / np.float32(quarter)))
    freqs = positions.astype(jnp.float32)[..., None] * jnp.asarray(inv, jnp.float32)  # [G, P, 2, hd/4]
    freqs = freqs.reshape(*freqs.shape[:-2], -1)  # [G, P, hd/2]: rows' then columns'
    freqs = jnp.concatenate([freqs, freqs], axis=-1)[:, :, None, :]
    return jnp.cos(freqs), jnp.sin(freqs)


class VisionAttention(nnx.Module):
    """Multi-head self-attention over one group's patches, limited to patches of equal segment id."""

    def __init__(self, config: VisionConfig, *, dtype: Any, param_dtype: Any, rngs: nnx.Rngs):
        d = config.hidden_size
        self.qkv = _linear(d, 3 * d, dtype, param_dtype, rngs)
        self.proj = _linear(d, d, dtype, param_dtype, rngs)
        self.num_heads, self.head_dim = config.num_heads, config.head_dim

    def __call__(self, x: jax.Array, cos: jax.Array, sin: jax.Array, segments: jax.Array) -> jax.Array:
        """x [G, P, D], rotary tables [G, P, 1, hd], segments [G, P] int32 -> [G, P, D]."""
        g, p, d = x.shape
        q, k, v = jnp.moveaxis(self.qkv(x).reshape(g, p, 3, self.num_heads, self.head_dim), 2, 0)
        # transformers rotates in float32 and casts back
        q, k = (apply_rope(t.astype(jnp.float32), cos, sin).astype(x.dtype) for t in (q, k))
        scores = jnp.einsum("gqhd,gkhd->ghqk", q, k, preferred_element_type=jnp.float32) / math.sqrt(self.head_dim)
        same = segments[:, None, :, None] == segments[:, None, None, :]
        probs = jax.nn.softmax(jnp.where(same, scores, _NEG), axis=-1).astype(v.dtype)
        out = jnp.einsum("ghqk,gkhd->gqhd", probs, v).reshape(g, p, d)
        return self.proj(out)


class VisionMLP(nnx.Module):
    """SwiGLU with biases: down(silu(gate(x)) * up(x))."""

    def __init__(self, config: VisionConfig, *, dtype: Any, param_dtype: Any, rngs: nnx.Rngs):
        d, i = config.hidden_size, config.intermediate_size
        self.gate_proj = _linear(d, i, dtype, param_dtype, rngs)
        self.up_proj = _linear(d, i, dtype, param_dtype, rngs)
        self.down_proj = _linear(i, d, dtype, param_dtype, rngs)

    def __call__(self, x: jax.Array) -> jax.Array:
        return self.down_proj(jax.nn.silu(self.gate_proj(x)) * self.up_proj(x))


class VisionBlock(nnx.Module):
    """Pre-norm block: x + attn(norm1(x)); x + mlp(norm2(x))."""

    def __init__(self, config: VisionConfig, *, dtype: Any, param_dtype: Any, rngs: nnx.Rngs):
        self.norm1 = RMSNorm(config.hidden_size, config.rms_norm_eps, param_dtype=param_dtype)
        self.norm2 = RMSNorm(config.hidden_size, config.rms_norm_eps, param_dtype=param_dtype)
        self.attn = VisionAttention(config, dtype=dtype, param_dtype=param_dtype, rngs=rngs)
        self.mlp = VisionMLP(config, dtype=dtype, param_dtype=param_dtype, rngs=rngs)

    def __call__(self, x, cos, sin, segments):
        x = x + self.attn(self.norm1(x), cos, sin, segments)
        return x + self.mlp(self.norm2(x))


class Gelu(nnx.Module):
    """The exact (erf) GELU between the merger's two projections (a module so their indices stay HF's 0 and 2)."""

    def __call__(self, x: jax.Array) -> jax.Array:
        return jax.nn.gelu(x, approximate=False)


class PatchMerger(nnx.Module):
    """RMSNorm, then each merge unit's patches concatenated [merge_unit * D] -> Linear, GELU, Linear -> [out]."""

    def __init__(self, config: VisionConfig, *, dtype: Any, param_dtype: Any, rngs: nnx.Rngs):
        wide = config.hidden_size * config.merge_unit
        self.ln_q = RMSNorm(config.hidden_size, config.rms_norm_eps, param_dtype=param_dtype)
        self.mlp = nnx.List([_linear(wide, wide, dtype, param_dtype, rngs), Gelu(),
                             _linear(wide, config.out_hidden_size, dtype, param_dtype, rngs)])
        self.merge_unit = config.merge_unit

    def __call__(self, x: jax.Array) -> jax.Array:
        """x [G, P, D] -> [G, P // merge_unit, out]."""
        g, p, d = x.shape
        x = self.ln_q(x).reshape(g, p // self.merge_unit, self.merge_unit * d)
        for layer in self.mlp:
            x = layer(x)
        return x


class VisionTower(nnx.Module):
    """Patches -> language-model embeddings, one per merge unit, in the processor's (image-major) order."""

    def __init__(self, config: VisionConfig, *, dtype: Any = jnp.float32, param_dtype: Any = jnp.float32,
                 rngs: nnx.Rngs):
        self.config = config
        kw = dict(dtype=dtype, param_dtype=param_dtype, rngs=rngs)
        self.patch_embed = PatchEmbed(config, **kw)
        self.blocks = nnx.List([VisionBlock(config, **kw) for _ in range(config.depth)])
        self.merger = PatchMerger(config, **kw)

    def __call__(self, inputs: VisionInputs) -> jax.Array:
        """VisionInputs of G groups of P patches -> embeddings [G * P // merge_unit, out_hidden_size]."""
        chex.assert_rank(inputs.pixels, 3)
        g, p, _ = inputs.pixels.shape
        chex.assert_shape(inputs.positions, (g, p, 2))
        chex.assert_shape([inputs.windows, inputs.frames], (g, p))
        if p % self.config.merge_unit:
            raise ValueError(f"{p} patches per group do not form whole merge units of {self.config.merge_unit}.")
        x = self.patch_embed(inputs.pixels)
        cos, sin = vision_rope_tables(inputs.positions, self.config)
        full = set(self.config.fullatt_block_indexes)
        for i, block in enumerate(self.blocks):
            x = block(x, cos, sin, inputs.frames if i in full else inputs.windows)
        out = self.merger(x)
        return out.reshape(-1, out.shape[-1])
