"""Flax NNX causal LMs (Qwen2/2.5, Qwen3, Llama 3.x), value model, KV cache, HF load/export, LoRA."""

from ragen_jax.models.config import ModelConfig, config_from_hf, config_to_hf
from ragen_jax.models.hf import from_pretrained, load_model, load_tokenizer, read_config, save_pretrained
from ragen_jax.models.hf_files import CheckpointError
from ragen_jax.models.lora import apply_lora, has_lora, lora_filter, merge_lora
from ragen_jax.models.tokenizer import Tokenizer
from ragen_jax.models.cache import KVCache, init_cache
from ragen_jax.models.transformer import CausalLM, ValueModel

__all__ = [
    "ModelConfig", "CausalLM", "ValueModel", "KVCache", "init_cache", "config_from_hf", "config_to_hf",
    "from_pretrained", "load_model", "load_tokenizer", "read_config", "save_pretrained",
    "apply_lora", "has_lora", "lora_filter", "merge_lora", "Tokenizer", "CheckpointError",
]
from ragen_jax.models.tiny import load_tiny_tokenizer, make_tiny_model, tiny_config

__all__ += ["load_tiny_tokenizer", "make_tiny_model", "tiny_config"]
