"""Scoring rows with images: the policy's log-probs of a vision-language model's rows, the vision tower run inside
the same (jitted, differentiated) function, so the update trains the tower unless `model.freeze_vision` keeps it
in the frozen part of the split (`setup.split_model`).

Host side, `vision_rows` turns a batch's rows and their pictures (`TrajectoryBatch.images`) into M-RoPE positions
[3, B, T] and the tower's inputs; `vl_policy_logprobs` is `steps.policy_logprobs` with them.
"""

from __future__ import annotations

from typing import Any, Sequence

import chex
import jax
import numpy as np

from ragen_jax.algos.logprobs import token_logprobs_and_entropy
from ragen_jax.models.rope import rope_inv_freq
from ragen_jax.models.vision.layout import VisionInputs, rope_index, vision_inputs
from ragen_jax.models.vision.model import mrope_tables


def vision_rows(tokens: np.ndarray, attention_mask: np.ndarray, images: Sequence[Any],
                vl_config: Any) -> tuple[np.ndarray, VisionInputs | None]:
    """Rows tokens [B, T] (right-padded, attention_mask [B, T]) and their pictures (one `RowImages` per row) ->
    (M-RoPE positions [3, B, T] int32, the vision tower's inputs for every picture in row order, or None)."""
    tokens, mask = np.asarray(tokens), np.asarray(attention_mask, bool)
    if len(images) != tokens.shape[0]:
        raise ValueError(f"Got pictures for {len(images)} rows but {tokens.shape[0]} rows of tokens.")
    with_images = [im for im in images if im is not None and im.num_images]
    grid = np.concatenate([im.grid_thw for im in with_images]) if with_images else None
    positions, _ = rope_index(tokens, grid, vl_config, mask)
    if grid is None:
        return positions, None
    pixels = np.concatenate([im.pixel_values for im in with_images])
    return positions, vision_inputs(pixels, grid, vl_config.vision)


def vl_policy_logprobs(model, tokens: jax.Array, attention_mask: jax.Array, positions: jax.Array,
                       inputs: VisionInputs | None, *, temperature: float = 1.0,
                       chunk_size: int = 256) -> tuple[jax.Array, jax.Array]:
    """Token-aligned log p(tokens[t] | tokens[<t], pictures) and entropy [B, T] (0 at t=0) of a Qwen25VLModel:
    tokens/attention_mask [B, T], M-RoPE positions [3, B, T], the rows' pictures through the vision tower."""
    chex.assert_rank([tokens, attention_mask], 2)
    chex.assert_shape(positions, (3,) + tokens.shape)
    embeds = None if inputs is None else model.encode_images(inputs)
    hidden, _ = model.hidden(tokens, positions, image_embeds=embeds, attention_mask=attention_mask)
    lp, ent = token_logprobs_and_entropy(hidden[:, :-1], model.lm_head_matrix(), tokens[:, 1:],
                                         chunk_size=chunk_size, temperature=temperature)
    pad = lambda x: jax.numpy.pad(x, ((0, 0), (1, 0)))  # noqa: E731
    return pad(lp), pad(ent)


# The per-row image arrays a training batch carries (all with the rows as leading axis, so compaction, sharding and
# micro-batching treat them as any other row array): M-RoPE positions, and I picture slots of P patches per row.
IMAGE_KEYS = ("mrope", "pixels", "patch_positions", "patch_windows", "patch_frames")


def row_image_arrays(tokens: np.ndarray, attention_mask: np.ndarray, images: Sequence[Any], vl_config: Any,
                     slots: int | None = None) -> dict[str, np.ndarray]:
    """Rows tokens [B, T] and their pictures (one `RowImages` per row, every picture of one grid) -> IMAGE_KEYS:
    mrope [B, 3, T] int32, pixels [B, I, P, F] float32 (a row's pictures in order, unused slots zero),
    patch_positions [B, P, 2], patch_windows [B, P], patch_frames [B, P] int32 (one picture's layout). I = `slots`
    (default: the most pictures of a row, rounded up to a power of two, so few programs compile)."""
    tokens, mask = np.asarray(tokens), np.asarray(attention_mask, bool)
    b = tokens.shape[0]
    grids = {tuple(int(x) for x in g) for im in images if im is not None for g in im.grid_thw}
    if len(grids) > 1:
        raise ValueError(f"The rows' pictures have {len(grids)} grids {sorted(grids)}; training on rows with "
                         "pictures needs one picture size per run (render every observation at one size).")
    positions, _ = vision_rows(tokens, mask, images, vl_config)
    most = max((im.num_images for im in images if im is not None), default=0)
    slots = max(1, 1 << max(most - 1, 0).bit_length()) if slots is None else slots
    if most > slots:
        raise ValueError(f"A row holds {most} pictures but only {slots} slots were given.")
    vision = vl_config.vision
    grid = next(iter(grids)) if grids else (1, 2 * vision.spatial_merge_size, 2 * vision.spatial_merge_size)
    patches = int(np.prod(grid))
    layout = vision_inputs(np.zeros((patches, vision.patch_features), np.float32), np.array([grid]), vision)
    pixels = np.zeros((b, slots, patches, vision.patch_features), np.float32)
    for r, im in enumerate(images):
        if im is not None and im.num_images:
            pixels[r, :im.num_images] = im.pixel_values.reshape(im.num_images, patches, -1)
    rows = lambda x: np.broadcast_to(np.asarray(x)[0], (b,) + np.asarray(x).shape[1:]).copy()  # noqa: E731
    return {"mrope": np.ascontiguousarray(positions.transpose(1, 0, 2)), "pixels": pixels,
            "patch_positions": rows(layout.positions), "patch_windows": rows(layout.windows),
            "patch_frames": rows(layout.frames)}


def row_image_embeds(model, arrays: dict[str, jax.Array], tokens: jax.Array) -> jax.Array:
    """Input embeddings [B, T, D] of rows tokens [B, T]: each row's image tokens take, in order, the vision
    tower's output for its own picture slots (`row_image_arrays`; slots past its pictures are unused)."""
    pixels = arrays["pixels"]
    b, slots, p, f = pixels.shape
    tile = lambda x: jax.numpy.repeat(x, slots, axis=0)  # noqa: E731 - each slot of a row shares the layout
    inputs = VisionInputs(pixels=pixels.reshape(b * slots, p, f), positions=tile(arrays["patch_positions"]),
                          windows=tile(arrays["patch_windows"]), frames=tile(arrays["patch_frames"]))
    embeds = model.encode_images(inputs).reshape(b, -1, model.config.hidden_size)  # [B, I * n, D]
    text = model.model.embed_tokens(tokens)
    is_image = tokens == model.vl_config.image_token_id

    def place(row_text, row_is_image, row_embeds):
        index = jax.numpy.clip(jax.numpy.cumsum(row_is_image.astype(jax.numpy.int32)) - 1, 0, row_embeds.shape[0] - 1)
        return jax.numpy.where(row_is_image[:, None], row_embeds[index].astype(row_text.dtype), row_text)

    return jax.vmap(place)(text, is_image, embeds)


def vl_row_logprobs(model, tokens: jax.Array, attention_mask: jax.Array, arrays: dict[str, jax.Array], *,
                    temperature: float = 1.0, chunk_size: int = 256) -> tuple[jax.Array, jax.Array]:
    """`vl_policy_logprobs` from a training batch's per-row image arrays (IMAGE_KEYS): token-aligned log-probs and
    entropy [B, T], the vision tower inside (it trains unless frozen)."""
    positions = jax.numpy.moveaxis(arrays["mrope"], 1, 0)  # [3, B, T]
    embeds = row_image_embeds(model, arrays, tokens)
    rope = mrope_tables(positions, rope_inv_freq(model.config), model.vl_config.mrope_section, model.config.jnp_dtype)
    hidden, _ = model.model(tokens, positions[0], attention_mask=attention_mask, embeds=embeds, rope=rope)
    lp, ent = token_logprobs_and_entropy(hidden[:, :-1], model.lm_head_matrix(), tokens[:, 1:],
                                         chunk_size=chunk_size, temperature=temperature)
    pad = lambda x: jax.numpy.pad(x, ((0, 0), (1, 0)))  # noqa: E731
    return pad(lp), pad(ent)
