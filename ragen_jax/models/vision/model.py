"""Qwen2.5-VL in Flax NNX: the vision tower, and our Qwen2 decoder reading image features in place of the image
placeholder tokens, with multimodal rotary positions (M-RoPE).

The language model is `CausalLM`'s (same layers, KV cache, logits, decode paths); this class adds `visual` and takes
positions [3, B, T] (temporal, height, width streams from `layout.rope_index`) or [B, T] (text: the three streams
equal, where M-RoPE is plain RoPE). A decode step after a prompt with images is a text step at position
slot + rope_deltas[b], so the text sampler decodes it unchanged once positions carry the delta.
"""

from __future__ import annotations

from typing import Any

import chex
import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from ragen_jax.models.rope import rope_inv_freq
from ragen_jax.models.transformer import CausalLM
from ragen_jax.models.vision.config import VLConfig
from ragen_jax.models.vision.layout import VisionInputs
from ragen_jax.models.vision.tower import VisionTower


def mrope_tables(positions: jax.Array, inv_freq: np.ndarray, mrope_section: tuple[int, int, int],
                 dtype: Any) -> tuple[jax.Array, jax.Array]:
    """(cos, sin) [B, T, 1, hd] for M-RoPE positions [3, B, T]: the first mrope_section[0] frequencies turn with the
    temporal stream, the next mrope_section[1] with the row, the last with the column (each half of the head alike,
    as transformers' Qwen2.5-VL rotary embedding)."""
    chex.assert_rank(positions, 3)
    stream = np.repeat(np.arange(3), mrope_section)  # [hd/2]: the stream driving each frequency
    pos = jnp.moveaxis(jnp.take(positions.astype(jnp.float32), jnp.asarray(stream), axis=0), 0, -1)  # [B, T, hd/2]
    freqs = pos * jnp.asarray(inv_freq, jnp.float32)
    cos, sin = (jnp.concatenate([f, f], axis=-1)[:, :, None, :].astype(dtype) for f in (jnp.cos(freqs), jnp.sin(freqs)))
    return cos, sin


def place_image_embeds(embeds: jax.Array, is_image: jax.Array, image_embeds: jax.Array) -> jax.Array:
    """embeds [B, T, D] with its image placeholder tokens (is_image [B, T]) replaced, in row-major order, by the rows
    of image_embeds [N, D]. Placeholders beyond N get NaN (their count must equal N; checked where concrete)."""
    b, t, d = embeds.shape
    chex.assert_shape(is_image, (b, t))
    chex.assert_rank(image_embeds, 2)
    n = image_embeds.shape[0]
    if not isinstance(is_image, jax.core.Tracer):
        found = int(np.asarray(is_image).sum())
        if found != n:
            raise ValueError(f"The tokens hold {found} image placeholder tokens but the vision tower gave {n} "
                             "embeddings; each image needs exactly its grid's count (`expand_image_placeholders`).")
    flat = is_image.reshape(-1)
    index = jnp.cumsum(flat.astype(jnp.int32)) - 1
    picked = jnp.take(image_embeds.astype(embeds.dtype), jnp.clip(index, 0, max(n - 1, 0)), axis=0)
    picked = jnp.where((index < n)[:, None], picked, jnp.nan)
    return jnp.where(flat[:, None], picked, embeds.reshape(-1, d)).reshape(b, t, d)


class Qwen25VLModel(CausalLM):
    """Qwen2.5-VL: `visual` (the vision tower), `model` (the Qwen2 decoder) and `lm_head` (absent when tied), named
    as transformers' checkpoints name them. `config` is the language model's ModelConfig (what caches and samplers
    read); `vl_config` the whole VLConfig."""

    def __init__(self, config: VLConfig, *, rngs: nnx.Rngs):
        super().__init__(config.text, rngs=rngs)
        self.vl_config = config
        self.visual = VisionTower(config.vision, dtype=config.text.jnp_dtype, param_dtype=config.text.jnp_param_dtype,
                                  rngs=rngs)

    def encode_images(self, inputs: VisionInputs) -> jax.Array:
        """VisionInputs (`layout.vision_inputs`) -> image embeddings [N, D], one per image placeholder token, in
        image order."""
        return self.visual(inputs)

    def embed(self, tokens: jax.Array, image_embeds: jax.Array | None = None) -> jax.Array:
        """tokens [B, T] -> input embeddings [B, T, D], image placeholders replaced by image_embeds [N, D]."""
        x = self.model.embed_tokens(tokens)
        if image_embeds is None:
            return x
        return place_image_embeds(x, tokens == self.vl_config.image_token_id, image_embeds)

    def hidden(self, tokens, positions, *, image_embeds=None, attention_mask=None, cache=None, cache_index=None,
               kv_len=None, query_lengths=None, hidden_at=None):
        """tokens [B, T], positions [3, B, T] (M-RoPE) or [B, T] (three equal streams), image_embeds [N, D] for the
        tokens' image placeholders (None: a text-only chunk) -> (hidden [B, T, D], new cache | None). The other
        arguments are CausalLM.hidden's."""
        rope = None
        if positions.ndim == 3:
            chex.assert_shape(positions, (3,) + tokens.shape)
            rope = mrope_tables(positions, rope_inv_freq(self.config), self.vl_config.mrope_section,
                                self.config.jnp_dtype)
            positions = positions[0]
        elif image_embeds is not None:
            raise ValueError("A chunk with images needs M-RoPE positions [3, B, T] (`rope_index`), not [B, T].")
        embeds = None if image_embeds is None else self.embed(tokens, image_embeds)
        return self.model(tokens, positions, attention_mask=attention_mask, cache=cache, cache_index=cache_index,
                          kv_len=kv_len, query_lengths=query_lengths, hidden_at=hidden_at, embeds=embeds, rope=rope)

    def __call__(self, tokens, positions, *, image_embeds=None, attention_mask=None, cache=None, cache_index=None,
                 kv_len=None, query_lengths=None):
        """-> (logits [B, T, V] float32, new cache | None)."""
        h, new_cache = self.hidden(tokens, positions, image_embeds=image_embeds, attention_mask=attention_mask,
                                   cache=cache, cache_index=cache_index, kv_len=kv_len, query_lengths=query_lengths)
        return self.logits(h), new_cache


def decode_positions(slots: jax.Array, rope_deltas: jax.Array) -> jax.Array:
    """[B, N] positions of tokens at cache slots [B, N] of rows whose prompt had rope_deltas [B]."""
    chex.assert_rank(slots, 2)
    return slots + rope_deltas.astype(slots.dtype)[:, None]
