"""Prompts with images for Qwen2.5-VL: pixels through transformers' own Qwen2-VL image processor, and the image
placeholder tokens the chat template writes expanded to one per image token.

transformers' `Qwen2VLImageProcessor` needs torchvision and falls back to `Qwen2VLImageProcessorPil` (pillow) without
it; we use the pillow one explicitly, so CPU machines without torchvision resize and normalise exactly as others. Its
full processor (`Qwen2_5_VLProcessor`) also needs a torchvision video processor, so the placeholder expansion it
does (each `<|image_pad|>` -> as many as the image has tokens) is `expand_image_placeholders` here.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

import numpy as np

from ragen_jax.models.vision.config import VisionConfig
from ragen_jax.models.vision.layout import image_token_counts

VISION_START, IMAGE_PAD, VISION_END, VIDEO_PAD = "<|vision_start|>", "<|image_pad|>", "<|vision_end|>", "<|video_pad|>"
VISION_TOKENS = (VISION_START, VISION_END, IMAGE_PAD, VIDEO_PAD)
# A Qwen2-VL style chat template: string contents as the text template; list contents of {"type": "text", "text"} and
# {"type": "image"} items, each image as <|vision_start|><|image_pad|><|vision_end|>.
VL_CHAT_TEMPLATE = (
    "{%- for message in messages %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' }}"
    "{%- if message['content'] is string %}{{- message['content'] }}"
    "{%- else %}{%- for item in message['content'] %}"
    "{%- if item['type'] == 'image' %}{{- '<|vision_start|><|image_pad|><|vision_end|>' }}"
    "{%- elif item['type'] == 'text' %}{{- item['text'] }}{%- endif %}"
    "{%- endfor %}{%- endif %}"
    "{{- '<|im_end|>\\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)


def image_processor_for(vision: VisionConfig, *, min_pixels: int | None = None, max_pixels: int | None = None) -> Any:
    """transformers' Qwen2-VL image processor (pillow backend) for this tower's patch, temporal patch and merge
    sizes; min/max_pixels bound the resized area (the processor's defaults when None)."""
    from transformers import Qwen2VLImageProcessorPil

    kwargs: dict[str, Any] = dict(patch_size=vision.patch_size, temporal_patch_size=vision.temporal_patch_size,
                                  merge_size=vision.spatial_merge_size)
    if min_pixels is not None:
        kwargs["min_pixels"] = min_pixels
    if max_pixels is not None:
        kwargs["max_pixels"] = max_pixels
    return Qwen2VLImageProcessorPil(**kwargs)


def process_images(images: Sequence[np.ndarray], image_processor: Any) -> tuple[np.ndarray, np.ndarray]:
    """RGB images [H, W, 3] uint8 -> (pixel_values [N, F] float32, grid_thw [I, 3] int64) from the processor."""
    for i, image in enumerate(images):
        if np.ndim(image) != 3 or np.shape(image)[-1] != 3:
            raise ValueError(f"image {i} has shape {np.shape(image)}; images are RGB arrays [H, W, 3].")
    out = image_processor(images=[np.asarray(im) for im in images], return_tensors="np")
    return np.asarray(out["pixel_values"], np.float32), np.asarray(out["image_grid_thw"], np.int64)


def expand_image_placeholders(ids: Sequence[int], grid_thw: np.ndarray, image_pad_id: int,
                              merge_size: int) -> list[int]:
    """Token ids with the k-th image_pad_id repeated as many times as image k of grid_thw [I, 3] has tokens (the
    expansion transformers' Qwen2.5-VL processor makes on the text)."""
    counts = image_token_counts(grid_thw, merge_size)
    ids = [int(i) for i in ids]
    found = ids.count(int(image_pad_id))
    if found != len(counts):
        raise ValueError(f"The prompt holds {found} image placeholders but {len(counts)} images were given; the chat "
                         "template writes one <|image_pad|> per image item.")
    out, k = [], 0
    for i in ids:
        if i == image_pad_id:
            out.extend([i] * int(counts[k]))
            k += 1
        else:
            out.append(i)
    return out


def content_with_images(text: str, marker: str) -> str | list[dict[str, str]]:
    """An observation text with image markers (`envs.observation.IMAGE_MARKER`) -> chat content: the text itself
    without a marker, else a list of {"type": "text"} and {"type": "image"} items in order (one per marker)."""
    if marker not in text:
        return text
    items: list[dict[str, str]] = []
    for k, part in enumerate(text.split(marker)):
        if k:
            items.append({"type": "image"})
        if part:
            items.append({"type": "text", "text": part})
    return items


def encode_vl_prompt(tokenizer: Any, messages: Sequence[Mapping[str, Any]], images: Sequence[np.ndarray],
                     image_processor: Any, *, add_generation_prompt: bool = True) -> dict[str, np.ndarray]:
    """Chat messages (contents a string or a list of text/image items, images in order) -> {"tokens" [T] int32,
    "pixel_values" [N, F] float32, "image_grid_thw" [I, 3] int64}, the placeholders expanded. `tokenizer` is our
    Tokenizer (its chat template must write images as VL_CHAT_TEMPLATE does)."""
    hf = tokenizer.hf
    text = hf.apply_chat_template([dict(m) for m in messages], tokenize=False,
                                  add_generation_prompt=add_generation_prompt)
    ids = tokenizer.encode(text)
    pad = tokenizer.token_id(IMAGE_PAD)
    if images:
        pixel_values, grid = process_images(images, image_processor)
    else:
        pixel_values, grid = np.zeros((0, 0), np.float32), np.zeros((0, 3), np.int64)
    ids = expand_image_placeholders(ids, grid, pad, int(image_processor.merge_size))
    return {"tokens": np.asarray(ids, np.int32), "pixel_values": pixel_values, "image_grid_thw": grid}
