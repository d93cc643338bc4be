"""Image observations in token-in/token-out contexts, for a vision-language policy (Qwen2.5-VL).

An observation's text holds one `envs.observation.IMAGE_MARKER` per picture (its images ride on the turn's record,
`TurnRecord.images`). In a context, each marker becomes the VL chat template's image text
(<|vision_start|><|image_pad|><|vision_end|>), the chat template renders the rest as for text, and each
<|image_pad|> is then expanded to its image's token count. The images are environment input: their tokens carry
turn -1, so no loss mask ever covers them. A context keeps its images' processor outputs beside the tokens
(`RowImages`), in order of appearance.
"""

from __future__ import annotations

import dataclasses
import hashlib
from typing import Any, Sequence

import numpy as np

from envs.observation import IMAGE_MARKER
from ragen_jax.models.vision.layout import image_token_counts
from ragen_jax.models.vision.processor import IMAGE_PAD, VISION_END, VISION_START, process_images

IMAGE_TEXT = VISION_START + IMAGE_PAD + VISION_END  # what the VL chat template writes for one image item


@dataclasses.dataclass(frozen=True)
class RowImages:
    """One context's images as the image processor gives them: pixel_values [N, F] float32 (N patches of every
    image), grid_thw [I, 3] int64 (I images, in order of appearance); `keys` identify each picture (equal pictures,
    equal keys), so two contexts whose tokens agree can tell whether their images do too."""

    pixel_values: np.ndarray
    grid_thw: np.ndarray
    keys: tuple[str, ...] = ()

    @property
    def num_images(self) -> int:
        return int(self.grid_thw.shape[0])


def empty_row_images(features: int) -> RowImages:
    return RowImages(np.zeros((0, features), np.float32), np.zeros((0, 3), np.int64), ())


def concat_row_images(parts: Sequence[RowImages], features: int) -> RowImages:
    """The images of several contexts, one after the other (the pixel rows the vision tower takes for a batch)."""
    parts = [p for p in parts if p.num_images]
    if not parts:
        return empty_row_images(features)
    return RowImages(np.concatenate([p.pixel_values for p in parts]), np.concatenate([p.grid_thw for p in parts]),
                     tuple(k for p in parts for k in p.keys))


def image_key(image: np.ndarray) -> str:
    """A digest of one picture (shape and bytes)."""
    image = np.ascontiguousarray(image)
    return hashlib.sha1(repr(image.shape).encode() + image.tobytes()).hexdigest()


class ImagePrompts:
    """How a VL policy reads image observations: the image processor (transformers' Qwen2-VL one), the
    <|image_pad|> id and the tower's merge size. Each distinct picture is processed once (a rollout shows the same
    board in many contexts)."""

    def __init__(self, tokenizer: Any, image_processor: Any, *, cache_size: int = 4096):
        self.image_processor = image_processor
        self.merge_size = int(image_processor.merge_size)
        self.image_pad_id = tokenizer.token_id(IMAGE_PAD)
        self.features = int(3 * image_processor.temporal_patch_size * image_processor.patch_size ** 2)
        self._processed: dict[str, tuple[np.ndarray, np.ndarray]] = {}
        self._cache_size = cache_size

    def process(self, images: Sequence[np.ndarray]) -> RowImages:
        """RGB pictures [H, W, 3] uint8 -> RowImages, in order."""
        if not len(images):
            return empty_row_images(self.features)
        keys = tuple(image_key(im) for im in images)
        for key, image in zip(keys, images):
            if key not in self._processed:
                if len(self._processed) >= self._cache_size:
                    self._processed.pop(next(iter(self._processed)))
                self._processed[key] = process_images([image], self.image_processor)
        pixels, grids = zip(*(self._processed[k] for k in keys))
        return RowImages(np.concatenate(pixels), np.concatenate(grids), keys)

    def assemble(self, builder: Any, messages: list[dict], images: Sequence[np.ndarray], *,
                 add_generation_prompt: bool) -> tuple[np.ndarray, np.ndarray, RowImages]:
        """`ContextBuilder.assemble` of messages whose non-assistant contents hold IMAGE_MARKERs, one per picture of
        `images` in order -> (tokens [L], turn_of_token [L] (-1 on every image token), RowImages)."""
        rendered, markers = [], 0
        for m in messages:
            if m["role"] != "assistant" and isinstance(m["content"], str) and IMAGE_MARKER in m["content"]:
                markers += m["content"].count(IMAGE_MARKER)
                m = dict(m, content=m["content"].replace(IMAGE_MARKER, IMAGE_TEXT))
            rendered.append(m)
        if markers != len(images):
            raise ValueError(f"The context shows {markers} {IMAGE_MARKER} markers but its turns hold {len(images)} "
                             "images; an observation needs one marker per picture (envs.observation.Observation).")
        tokens, turns = builder.assemble(rendered, add_generation_prompt=add_generation_prompt)
        row = self.process(images)
        return (*expand_image_tokens(tokens, turns, row.grid_thw, self.image_pad_id, self.merge_size), row)


def expand_image_tokens(tokens: np.ndarray, turns: np.ndarray, grid_thw: np.ndarray, image_pad_id: int,
                        merge_size: int) -> tuple[np.ndarray, np.ndarray]:
    """tokens [L] and turn_of_token [L] with the k-th <|image_pad|> repeated as many times as image k of
    grid_thw [I, 3] has tokens (turn -1 on all of them)."""
    tokens, turns = np.asarray(tokens, np.int32), np.asarray(turns, np.int32)
    at = np.flatnonzero(tokens == image_pad_id)
    counts = image_token_counts(grid_thw, merge_size)
    if len(at) != len(counts):
        raise ValueError(f"The context holds {len(at)} image placeholders but {len(counts)} images were given; the "
                         f"chat template must write {IMAGE_TEXT} once per image.")
    if np.any(turns[at] != -1):
        raise ValueError("An image placeholder sits inside a sampled response; images are environment input only.")
    repeats = np.ones(len(tokens), np.int64)
    repeats[at] = counts
    return np.repeat(tokens, repeats), np.repeat(turns, repeats)


def shown_images(history: Sequence[Any], start: int, end: int) -> list[np.ndarray]:
    """The pictures of turns history[start:end + 1], in order: what a context showing those turns' states holds
    (each shown state once, oldest first, in every context mode)."""
    return [image for record in history[start:end + 1] for image in getattr(record, "images", ())]


def image_spans(tokens: np.ndarray, image_pad_id: int) -> list[tuple[int, int]]:
    """[(start, end)] of each run of image tokens in tokens [L]: one per image (the chat template's image text
    puts <|vision_start|> and <|vision_end|> around each)."""
    is_image = np.concatenate([[False], np.asarray(tokens) == image_pad_id, [False]])
    edges = np.flatnonzero(is_image[1:] != is_image[:-1])
    return list(zip(edges[::2].tolist(), edges[1::2].tolist()))


def cached_prefix_length(prefix: int, tokens: np.ndarray, keys: Sequence[str], fed_keys: Sequence[str],
                         image_pad_id: int) -> int:
    """The longest prefix (<= `prefix`, the tokens' common prefix with what was fed) whose images are also the
    same pictures: image tokens of different pictures are the same ids, so a context that dropped an old turn
    would otherwise keep the old picture's keys and values. A prefix never ends inside an image."""
    for k, (start, end) in enumerate(image_spans(tokens[:max(prefix, 0)], image_pad_id)):
        if end >= prefix or k >= len(keys) or k >= len(fed_keys) or keys[k] != fed_keys[k]:
            return min(prefix, start)
    return prefix


def images_from(images: RowImages, first: int) -> RowImages:
    """The pictures of `images` from picture `first` on (their patches too): a chunk's, when the cache holds the
    first ones."""
    patches = np.concatenate([[0], np.cumsum(images.grid_thw.prod(axis=1))]).astype(np.int64)
    return RowImages(images.pixel_values[patches[first]:], images.grid_thw[first:], images.keys[first:])
