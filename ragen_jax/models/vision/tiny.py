"""A tiny Qwen2.5-VL built in (no downloads): the tiny tokenizer with Qwen's vision tokens and the VL chat template,
a small vision tower and the tiny language model, for tests and the CPU preset."""

from __future__ import annotations

from typing import Any

from flax import nnx

from ragen_jax.models.tiny import tiny_config
from ragen_jax.models.tokenizer import Tokenizer
from ragen_jax.models.vision.config import VisionConfig, VLConfig
from ragen_jax.models.vision.model import Qwen25VLModel
from ragen_jax.models.vision.processor import VISION_TOKENS, VL_CHAT_TEMPLATE

TINY_VL_VOCAB = 1152  # the tiny tokenizer's 1119 ids + the 4 vision tokens, rounded up
# 28-pixel tiles: one merged token per tile; windows of 2 x 2 tokens; block 1 attends to the whole image
TINY_VISION = dict(depth=2, hidden_size=32, intermediate_size=64, num_heads=2, patch_size=14, spatial_merge_size=2,
                   temporal_patch_size=2, window_size=56, fullatt_block_indexes=(1,))


def tiny_vl_tokenizer() -> Tokenizer:
    """The tiny tokenizer with <|vision_start|>, <|vision_end|>, <|image_pad|>, <|video_pad|> and VL_CHAT_TEMPLATE."""
    from transformers import PreTrainedTokenizerFast

    from ragen_jax.models.build_tiny_tokenizer import ASSET_DIR

    hf = PreTrainedTokenizerFast.from_pretrained(ASSET_DIR)
    hf.add_special_tokens({"additional_special_tokens": list(VISION_TOKENS)}, replace_extra_special_tokens=False)
    hf.chat_template = VL_CHAT_TEMPLATE
    return Tokenizer(hf)


def tiny_vl_config(tokenizer: Tokenizer, vision: dict[str, Any] | None = None, **text: Any) -> VLConfig:
    """A VLConfig of the tiny language model (`tiny_config(**text)`, vocabulary TINY_VL_VOCAB) and a small tower
    (TINY_VISION updated by `vision`), with the tokenizer's vision token ids."""
    lm = tiny_config(**{"vocab_size": TINY_VL_VOCAB, **text})
    if lm.vocab_size < len(tokenizer):
        raise ValueError(f"vocab_size={lm.vocab_size} is smaller than the tokenizer ({len(tokenizer)} ids).")
    tower = VisionConfig(**{**TINY_VISION, **(vision or {}), "out_hidden_size": lm.hidden_size})
    half = lm.head_dim // 2
    section = (half - 2 * (half * 3 // 8), half * 3 // 8, half * 3 // 8)  # Qwen2.5-VL's 16:24:24 split, scaled
    return VLConfig(text=lm, vision=tower, mrope_section=section,
                    image_token_id=tokenizer.token_id("<|image_pad|>"),
                    video_token_id=tokenizer.token_id("<|video_pad|>"),
                    vision_start_token_id=tokenizer.token_id("<|vision_start|>"),
                    vision_end_token_id=tokenizer.token_id("<|vision_end|>"))


def make_tiny_vl_model(seed: int = 0, vision: dict[str, Any] | None = None,
                       **text: Any) -> tuple[Qwen25VLModel, Tokenizer]:
    """(randomly initialised tiny Qwen25VLModel, its tokenizer); `text` overrides go to tiny_config."""
    tokenizer = tiny_vl_tokenizer()
    return Qwen25VLModel(tiny_vl_config(tokenizer, vision, **text), rngs=nnx.Rngs(seed)), tokenizer
