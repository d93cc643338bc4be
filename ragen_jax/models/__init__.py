"""Flax NNX causal LMs (Qwen2/2.5, Qwen3, Llama 3.x), value model, KV cache."""

from ragen_jax.models.config import ModelConfig, config_from_hf, config_to_hf
from ragen_jax.models.transformer import CausalLM, KVCache, ValueModel, init_cache

__all__ = ["ModelConfig", "CausalLM", "ValueModel", "KVCache", "init_cache", "config_from_hf", "config_to_hf"]
