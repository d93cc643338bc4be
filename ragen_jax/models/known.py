"""The shapes of the Hugging Face models the configs name, so a run can be sized before its weights are downloaded.

`--print_config` plans memory from a model's config.json; when the folder (or the hub id's local cache) is not
there yet, the planner takes the config.json keys below instead. They are the published config.json values of
each hub id (https://huggingface.co/<id>/blob/main/config.json, the keys `config_from_hf` reads), so
`known_config(id)` equals `read_config` of the downloaded folder.
"""

from __future__ import annotations

from typing import Any

from ragen_jax.models.config import ModelConfig, config_from_hf


def _qwen2(hidden: int, intermediate: int, layers: int, heads: int, kv_heads: int, vocab: int = 151936,
           tied: bool = True) -> dict[str, Any]:
    return dict(model_type="qwen2", hidden_size=hidden, intermediate_size=intermediate, num_hidden_layers=layers,
                num_attention_heads=heads, num_key_value_heads=kv_heads, vocab_size=vocab, tie_word_embeddings=tied,
                rope_theta=1000000.0, rms_norm_eps=1e-6, max_position_embeddings=32768, torch_dtype="bfloat16")


def _qwen3(hidden: int, intermediate: int, layers: int, heads: int, tied: bool = True) -> dict[str, Any]:
    return dict(model_type="qwen3", hidden_size=hidden, intermediate_size=intermediate, num_hidden_layers=layers,
                num_attention_heads=heads, num_key_value_heads=8, head_dim=128, vocab_size=151936,
                tie_word_embeddings=tied, rope_theta=1000000.0, rms_norm_eps=1e-6, max_position_embeddings=40960,
                attention_bias=False, torch_dtype="bfloat16")


def _llama3(hidden: int, intermediate: int, layers: int, heads: int, factor: float, tied: bool,
            head_dim: int | None = None) -> dict[str, Any]:
    hf = dict(model_type="llama", hidden_size=hidden, intermediate_size=intermediate, num_hidden_layers=layers,
              num_attention_heads=heads, num_key_value_heads=8, vocab_size=128256, tie_word_embeddings=tied,
              rope_theta=500000.0, rms_norm_eps=1e-5, max_position_embeddings=131072, attention_bias=False,
              torch_dtype="bfloat16",
              rope_scaling=dict(rope_type="llama3", factor=factor, low_freq_factor=1.0, high_freq_factor=4.0,
                                original_max_position_embeddings=8192))
    if head_dim:
        hf["head_dim"] = head_dim
    return hf


# hub id -> its config.json's keys
KNOWN_HF_CONFIGS: dict[str, dict[str, Any]] = {
    "Qwen/Qwen2.5-0.5B-Instruct": _qwen2(896, 4864, 24, 14, 2),
    "Qwen/Qwen2.5-1.5B-Instruct": _qwen2(1536, 8960, 28, 12, 2),
    "Qwen/Qwen2.5-3B-Instruct": _qwen2(2048, 11008, 36, 16, 2),
    "Qwen/Qwen2.5-7B-Instruct": _qwen2(3584, 18944, 28, 28, 4, vocab=152064, tied=False),
    "Qwen/Qwen3-0.6B": _qwen3(1024, 3072, 28, 16),
    "Qwen/Qwen3-1.7B": _qwen3(2048, 6144, 28, 16),
    "Qwen/Qwen3-4B": _qwen3(2560, 9728, 36, 32),
    "Qwen/Qwen3-8B": _qwen3(4096, 12288, 36, 32, tied=False),
    "meta-llama/Llama-3.2-1B-Instruct": _llama3(2048, 8192, 16, 32, 32.0, tied=True, head_dim=64),
    "meta-llama/Llama-3.2-3B-Instruct": _llama3(3072, 8192, 28, 24, 32.0, tied=True, head_dim=128),
    "meta-llama/Llama-3.1-8B-Instruct": _llama3(4096, 14336, 32, 32, 8.0, tied=False),
}


def known_config(name: str, *, param_dtype: str | None = None, dtype: str | None = None) -> ModelConfig | None:
    """The ModelConfig of hub id `name` (case-insensitive; a base model shares its Instruct variant's shapes) from
    KNOWN_HF_CONFIGS, with dtype overrides as `read_config`; None for a model not listed."""
    wanted = name.strip().rstrip("/").lower()
    for hub_id, hf in KNOWN_HF_CONFIGS.items():
        if wanted in (hub_id.lower(), hub_id.lower().removesuffix("-instruct")):
            return config_from_hf(hf, param_dtype=param_dtype, dtype=dtype)
    return None
