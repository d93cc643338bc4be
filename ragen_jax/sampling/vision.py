"""Sampling from a vision-language model (Qwen2.5-VL): the lockstep `Sampler.generate` with images.

Each row's new tokens come with their M-RoPE positions [3, n] (from `rope_index` over the row's whole context, so a
chunk that continues a cached row lines up with it) and the pictures whose image tokens the chunk holds. The
vision tower encodes the chunk's pictures (its own jitted program per picture grid), the begin program prefills
the tokens with the tower's output in place of their image tokens, and decoding runs text steps at position
slot + rope_delta. The KV cache carries across turns as for text. One process, one lane.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any, Sequence

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from ragen_jax.models.vision.layout import rope_index, vision_inputs
from ragen_jax.sampling.config import SamplingConfig
from ragen_jax.sampling.sampler import Sampler
from ragen_jax.sampling.turn import (SampleOutput, begin_turn, row_keys, settle_idle, state_output,
                                    temperature_arg)
from ragen_jax.shapes import bucket_length


def vl_config_of(graphdef: Any) -> Any:
    """The VLConfig a Qwen25VLModel's graphdef stores, or None for a text model."""
    from ragen_jax.models.vision.config import VLConfig

    for _, value in getattr(graphdef, "attributes", ()):
        config = getattr(value, "value", None)
        if isinstance(config, VLConfig):
            return config
    return None


def context_positions(tokens: np.ndarray, images: Any, vl_config: Any) -> tuple[np.ndarray, int]:
    """M-RoPE positions [3, L] and rope_delta of one row's whole context tokens [L] with its pictures (`RowImages`
    or None)."""
    grid = None if images is None or not images.num_images else images.grid_thw
    positions, deltas = rope_index(np.asarray(tokens)[None], grid, vl_config)
    return positions[:, 0], int(deltas[0])


class VLSampler(Sampler):
    """`Sampler` for a Qwen25VLModel (graphdef of one): `generate` takes each row's M-RoPE positions, pictures and
    rope_delta besides its tokens. No mesh, one lane."""

    def __init__(self, graphdef, *, cache_size: int, pad_id: int, batch_size: int, dtype=None,
                 kv_window: bool = True):
        super().__init__(graphdef, cache_size=cache_size, pad_id=pad_id, batch_size=batch_size, dtype=dtype,
                         kv_window=kv_window, out_first_weights=False, lanes=1)
        self.vl_config = vl_config_of(graphdef)
        if self.vl_config is None:
            raise ValueError("VLSampler needs a Qwen25VLModel's graphdef (ragen_jax.models.vision); use Sampler for "
                             "a text model.")
        self._encode = jax.jit(lambda params, inputs: nnx.merge(graphdef, params).encode_images(inputs))

    def image_embeds(self, params, pixel_values: np.ndarray, grid_thw: np.ndarray) -> jax.Array | None:
        """The vision tower's output [N, D] for pictures pixel_values [P, F], grid_thw [I, 3] (one program per
        picture grid); None without any."""
        if not len(grid_thw):
            return None
        return self._encode(params, vision_inputs(pixel_values, grid_thw, self.vl_config.vision))

    def generate(self, params, new_tokens, new_lens, key, config: SamplingConfig, *, cache=None, cache_lens=None,
                 active=None, positions: Sequence[np.ndarray] | None = None,
                 images: Sequence[Any] | None = None, rope_deltas=None) -> SampleOutput:
        """`Sampler.generate` with images: positions[b] [3, new_lens[b]] the M-RoPE positions of row b's new
        tokens (None: text positions cache_lens + i + rope_deltas), images[b] the pictures of its new tokens' image
        tokens (a `rollout.images.RowImages`, in order), rope_deltas [B] each row's decode offset after these
        tokens (`context_positions`). The vision tokens are never sampled (`SamplingConfig.banned_ids`): image
        tokens mean pictures wherever they are, so a response holding one could not be fed back."""
        b = self.batch_size
        vl = self.vl_config
        vision_ids = {vl.image_token_id, vl.video_token_id, vl.vision_start_token_id, vl.vision_end_token_id}
        config = dataclasses.replace(config, banned_ids=tuple(sorted(set(config.banned_ids) | vision_ids)))
        if cache is None:
            cache, cache_lens = self.init_cache()
        tokens = np.asarray(new_tokens, np.int32)
        lens = np.asarray(new_lens, np.int32)
        index = np.asarray(cache_lens, np.int32)
        on = np.ones((b,), bool) if active is None else np.asarray(active, bool)
        deltas = np.zeros((b,), np.int32) if rope_deltas is None else np.asarray(rope_deltas, np.int32)
        self._check(tokens, lens, index, on, config)
        self._check_cache(cache)
        bucket = bucket_length(max(int(lens.max(initial=1)), 1))
        padded = np.full((b, bucket), self.pad_id, np.int32)
        padded[:, :min(bucket, tokens.shape[1])] = tokens[:, :bucket]
        pos = np.broadcast_to(index[:, None] + deltas[:, None] + np.arange(bucket)[None], (3, b, bucket)).copy()
        picked = []
        for r in np.flatnonzero(on):
            if positions is not None and positions[r] is not None:
                pos[:, r, :lens[r]] = np.asarray(positions[r])[:, :lens[r]]
            if images is not None and images[r] is not None and images[r].num_images:
                picked.append(images[r])
        embeds = None
        if picked:
            embeds = self.image_embeds(params, np.concatenate([p.pixel_values for p in picked]),
                                       np.concatenate([p.grid_thw for p in picked]))
            embeds = jnp.pad(embeds, ((0, bucket_length(embeds.shape[0], minimum=1) - embeds.shape[0]), (0, 0)))
        keys = row_keys(key, np.arange(b))
        state = self.idle_state(config)
        end = int(np.max(np.where(on, index + lens, 0), initial=0)) + config.max_new_tokens
        fn = self._begin_fn(config, b, b, bucket, self.window_length(end), True)
        rows = jnp.arange(b, dtype=jnp.int32)
        cache, state = fn(params, cache, state, rows, rows, rows, jnp.asarray(padded), jnp.asarray(index),
                          jnp.asarray(np.maximum(lens, 1)), jnp.asarray(keys), temperature_arg(config),
                          jnp.asarray(pos, jnp.int32), embeds)
        state = settle_idle(state, jnp.asarray(on), jnp.asarray(index), jnp.int32(self.pad_id))
        decode = self._decode_fn(config, self.decode_window(end), config.max_new_tokens)
        cache, state = decode(params, None, cache, state, temperature_arg(config), jnp.asarray(deltas))
        return state_output(state, cache)

    def _begin_fn(self, config: SamplingConfig, rows: int, prefills: int, bucket: int, kv_len: int,
                  in_place: bool = False):
        """The begin program with M-RoPE positions and image embeddings (its last two arguments)."""
        config = config.program_key()
        build = lambda: jax.jit(functools.partial(begin_turn, self.graphdef, config, self.pad_id, kv_len,  # noqa
                                                  in_place), donate_argnums=(1, 2))
        return self._program(("begin_vl", config, rows, prefills, bucket, in_place, kv_len), build)
