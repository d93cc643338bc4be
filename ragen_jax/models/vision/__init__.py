"""Qwen2.5-VL in Flax NNX: vision tower, M-RoPE, image placeholders, Hugging Face load/export, image prompts."""

from ragen_jax.models.vision.config import (VisionConfig, VLConfig, qwen2_5_vl_3b_config, vl_config_from_hf,
                                            vl_config_to_hf)
from ragen_jax.models.vision.hf import load_vl_model, read_vl_config, save_vl_pretrained, vl_from_pretrained
from ragen_jax.models.vision.layout import VisionInputs, image_token_counts, rope_index, vision_inputs
from ragen_jax.models.vision.model import Qwen25VLModel, decode_positions, mrope_tables, place_image_embeds
from ragen_jax.models.vision.processor import (VL_CHAT_TEMPLATE, content_with_images, encode_vl_prompt,
                                               expand_image_placeholders, image_processor_for, process_images)
from ragen_jax.models.vision.tower import VisionTower

__all__ = [
    "VisionConfig", "VLConfig", "qwen2_5_vl_3b_config", "vl_config_from_hf", "vl_config_to_hf",
    "load_vl_model", "read_vl_config", "save_vl_pretrained", "vl_from_pretrained",
    "VisionInputs", "image_token_counts", "rope_index", "vision_inputs",
    "Qwen25VLModel", "decode_positions", "mrope_tables", "place_image_embeds",
    "VL_CHAT_TEMPLATE", "content_with_images", "encode_vl_prompt", "expand_image_placeholders",
    "image_processor_for", "process_images", "VisionTower",
]
