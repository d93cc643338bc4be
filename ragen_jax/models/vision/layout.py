"""Host-side bookkeeping of image inputs, from the image processor's grid sizes alone (numpy, before jit).

`vision_inputs` lays the processor's patches out for the vision tower with, per patch, its (row, col) for the
2-D rotary embedding, the attention window it belongs to and its frame (full attention stays within a frame).
transformers reorders the patches window by window and attends within each contiguous run; attention within
equal ids is the same computation without the reordering. `rope_index` gives M-RoPE's three position streams of a
prompt and each row's decode offset, as transformers' `get_rope_index` does for text and image tokens.
"""

from __future__ import annotations

from typing import Sequence

import flax
import jax
import numpy as np

from ragen_jax.models.vision.config import VisionConfig, VLConfig


@flax.struct.dataclass
class VisionInputs:
    """The vision tower's inputs: G groups of P patches (one group per image when every image has the same grid,
    else one group holding all of them); attention never crosses groups."""

    pixels: jax.Array  # [G, P, F] float: the processor's flattened patches (F = channels x temporal x patch x patch)
    positions: jax.Array  # [G, P, 2] int32: each patch's (row, col) in patches
    windows: jax.Array  # [G, P] int32: the window-attention window of each patch
    frames: jax.Array  # [G, P] int32: the frame of each patch (the full-attention blocks' span)


def image_token_counts(grid_thw: np.ndarray, merge_size: int) -> np.ndarray:
    """[I] language-model tokens per image of grid_thw [I, 3] (t x h x w patches, merge_size**2 per token)."""
    grid = np.asarray(grid_thw, np.int64).reshape(-1, 3)
    return (grid.prod(axis=1) // merge_size ** 2).astype(np.int64)


def _check_grid(grid: np.ndarray, config: VisionConfig) -> None:
    m = config.spatial_merge_size
    bad = [tuple(int(x) for x in g) for g in grid if g[0] < 1 or g[1] % m or g[2] % m or min(g[1:]) < m]
    if bad:
        raise ValueError(f"image grids {bad} (t, h, w patches) must have t >= 1 and h, w positive multiples of "
                         f"spatial_merge_size={m}: use the image processor built for this vision config "
                         "(`image_processor_for`).")


def _patch_layout(t: int, h: int, w: int, config: VisionConfig) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(positions [N, 2], window [N], frame [N]) of one image's patches in the processor's order: frame, then merge
    block row-major, then the merge_size x merge_size patches of the block."""
    m, vw = config.spatial_merge_size, config.window_merge_units
    frame, block_h, block_w, in_h, in_w = np.meshgrid(np.arange(t), np.arange(h // m), np.arange(w // m),
                                                      np.arange(m), np.arange(m), indexing="ij")
    rows, cols = block_h * m + in_h, block_w * m + in_w
    windows_w = -(-(w // m) // vw)
    window = (frame * -(-(h // m) // vw) + block_h // vw) * windows_w + block_w // vw
    return (np.stack([rows.ravel(), cols.ravel()], axis=-1), window.ravel(), frame.ravel())


def vision_inputs(pixel_values: np.ndarray, grid_thw: np.ndarray, config: VisionConfig,
                  group_images: bool = True) -> VisionInputs:
    """pixel_values [N, F] and grid_thw [I, 3] as the image processor returns them -> VisionInputs. With
    `group_images` and one grid for every image, each image is its own group (attention [P, P] per image instead of
    [N, N] over all)."""
    pixels, grid = np.asarray(pixel_values), np.asarray(grid_thw, np.int64).reshape(-1, 3)
    if pixels.ndim != 2 or pixels.shape[1] != config.patch_features:
        raise ValueError(f"pixel_values {pixels.shape} must be [patches, {config.patch_features}] (channels x "
                         "temporal x patch x patch of this vision config); use the matching image processor.")
    _check_grid(grid, config)
    if pixels.shape[0] != int(grid.prod(axis=1).sum()):
        raise ValueError(f"pixel_values holds {pixels.shape[0]} patches but grid_thw {grid.tolist()} describes "
                         f"{int(grid.prod(axis=1).sum())}.")
    positions, windows, frames = [], [], []
    window_base = frame_base = 0
    for t, h, w in grid.tolist():
        pos, window, frame = _patch_layout(t, h, w, config)
        positions.append(pos)
        windows.append(window + window_base)
        frames.append(frame + frame_base)
        window_base, frame_base = windows[-1].max() + 1, frames[-1].max() + 1
    groups = len(grid) if group_images and len(grid) > 1 and (grid == grid[0]).all() else 1
    return VisionInputs(pixels=pixels.reshape(groups, -1, pixels.shape[1]),
                        positions=np.concatenate(positions).astype(np.int32).reshape(groups, -1, 2),
                        windows=np.concatenate(windows).astype(np.int32).reshape(groups, -1),
                        frames=np.concatenate(frames).astype(np.int32).reshape(groups, -1))


def _image_positions(start: int, grid: Sequence[int], merge: int) -> np.ndarray:
    """[3, n] (temporal, height, width) positions of one image's tokens placed from `start`."""
    t, h, w = int(grid[0]), int(grid[1]) // merge, int(grid[2]) // merge
    tt, hh, ww = np.meshgrid(np.arange(t), np.arange(h), np.arange(w), indexing="ij")
    return np.stack([tt.ravel(), hh.ravel(), ww.ravel()]) + start


def _row_positions(tokens: np.ndarray, images: list, config: VLConfig) -> np.ndarray:
    """[3, n] M-RoPE positions of one row's real tokens; consumes this row's grids from the front of `images`."""
    merge = config.vision.spatial_merge_size
    is_image = tokens == config.image_token_id
    parts, pos, i, n = [], 0, 0, len(tokens)
    while i < n:
        if is_image[i]:
            if not images:
                raise ValueError("The tokens hold more image placeholders than grid_thw lists images.")
            grid = images.pop(0)
            count = int(np.prod(grid)) // merge ** 2
            if i + count > n or not is_image[i:i + count].all():
                raise ValueError(f"An image of grid {list(map(int, grid))} needs {count} consecutive image "
                                 f"placeholder tokens (id {config.image_token_id}); expand each placeholder with "
                                 "`expand_image_placeholders`.")
            parts.append(_image_positions(pos, grid, merge))
            pos += max(int(grid[1]), int(grid[2])) // merge
            i += count
        else:
            end = i + int(np.argmax(is_image[i:])) if is_image[i:].any() else n
            parts.append(np.broadcast_to(np.arange(pos, pos + end - i), (3, end - i)))
            pos += end - i
            i = end
    return np.concatenate(parts, axis=1) if parts else np.zeros((3, 0), np.int64)


def rope_index(tokens: np.ndarray, grid_thw: np.ndarray | None, config: VLConfig,
               attention_mask: np.ndarray | None = None,
               offsets: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """M-RoPE positions [3, B, T] int32 and rope_deltas [B] int32 of a batch of prompts.

    Text tokens advance all three streams by one; an image's tokens take (temporal, row, column) from where the text
    stopped, and the text after it continues from past its largest. Images are taken from grid_thw [I, 3] in row-major
    token order. Only the tokens attention_mask [B, T] marks are counted (padding keeps position 0). A token decoded
    at cache slot s of row b has position s + rope_deltas[b] in every stream.

    A chunk that continues row b (a later turn) starts at offsets[b] = its first cache slot + the row's rope_deltas
    so far; the row's rope_deltas then grow by the chunk's (returned) ones."""
    tokens = np.asarray(tokens)
    if tokens.ndim != 2:
        raise ValueError(f"tokens must be [B, T], got shape {tokens.shape}.")
    if (tokens == config.video_token_id).any():
        raise ValueError("The tokens hold video placeholders; ragen_jax's Qwen2.5-VL takes images only.")
    mask = np.ones(tokens.shape, bool) if attention_mask is None else np.asarray(attention_mask, bool)
    images = [] if grid_thw is None else list(np.asarray(grid_thw, np.int64).reshape(-1, 3))
    positions = np.zeros((3,) + tokens.shape, np.int64)
    deltas = np.zeros((tokens.shape[0],), np.int64)
    for b in range(tokens.shape[0]):
        row = _row_positions(tokens[b][mask[b]], images, config)
        deltas[b] = (row.max() + 1 - row.shape[1]) if row.shape[1] else 0
        positions[:, b, mask[b]] = row + (0 if offsets is None else int(offsets[b]))
    if images:
        raise ValueError(f"grid_thw lists {len(images)} more image(s) than the tokens hold placeholders for.")
    return positions.astype(np.int32), deltas.astype(np.int32)
