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
from ragen_jax.models.vision.layout import VisionInputs, rope_index, vision_inputs


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
