"""An observation that may hold images: its text with one marker where each image goes, and the images.

Text environments return plain strings; the grid environments' image formats (`render_mode="image"` or
"text_image") return this from `render_observation`, the images as RGB arrays [H, W, 3] uint8 (VAGEN's
`obs_str` with its `<image>` placeholders and `multi_modal_data`).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

IMAGE_MARKER = "<image>"


@dataclasses.dataclass(frozen=True)
class Observation:
    """text with one IMAGE_MARKER per image, in order; images: RGB [H, W, 3] uint8 arrays."""

    text: str
    images: tuple[np.ndarray, ...] = ()

    def __post_init__(self) -> None:
        if self.text.count(IMAGE_MARKER) != len(self.images):
            raise ValueError(f"An observation's text holds {self.text.count(IMAGE_MARKER)} {IMAGE_MARKER} markers but "
                             f"it has {len(self.images)} images; put one marker where each image goes.")
        for i, image in enumerate(self.images):
            if image.dtype != np.uint8 or image.ndim != 3 or image.shape[-1] != 3:
                raise ValueError(f"image {i} is {image.dtype} {image.shape}; images are RGB uint8 [H, W, 3].")


IMAGE_FORMATS = ("image", "text_image")  # observation formats with a picture of the board


def image_text(observation_format: str, grid: str) -> str:
    """The text of an image-format observation: the marker alone ("image"), or the marker then the symbol grid
    ("text_image")."""
    if observation_format not in IMAGE_FORMATS:
        raise ValueError(f"{observation_format!r} is not an image format; use one of {IMAGE_FORMATS}.")
    return IMAGE_MARKER if observation_format == "image" else f"{IMAGE_MARKER}\n{grid}"


class DrawsBoard:
    """Mixin for a grid JaxEnv that draws its state: `draw(state, sprites)` a pure JAX function -> [H, W, 3] uint8,
    `self.sprites` its tiles, `self.observation_format` and `render_text` the env's."""

    draw: Any  # staticmethod(state, sprites) -> RGB [H, W, 3] uint8
    sprites: np.ndarray
    observation_format: str

    def render_rgb(self, state: Any) -> Any:
        """One state -> its picture [H * S, W * S, 3] uint8, S = the tile size (pure JAX: jit it, vmap it over a
        batch of states)."""
        return self.draw(state, self.sprites)

    def render_image(self, state: Any) -> np.ndarray:
        """One unbatched state -> its picture on the host."""
        if getattr(self, "_jitted_draw", None) is None:
            self._jitted_draw = jax.jit(type(self).draw)
        return np.asarray(self._jitted_draw(jax.tree.map(jnp.asarray, state), self.sprites))

    def render_observation(self, state: Any, params: Any = None) -> Observation:
        """The observation of one unbatched state: its text and, in the image formats, its picture."""
        text = self.render_text(state, params)  # type: ignore[attr-defined]
        images = (self.render_image(state),) if self.observation_format in IMAGE_FORMATS else ()
        return Observation(text, images)
