"""Built-in tiny preset: a small Qwen2-family config and the project's own tokenizer (no downloads)."""

from __future__ import annotations

from typing import Any

from flax import nnx

from ragen_jax.models.build_tiny_tokenizer import ASSET_DIR
from ragen_jax.models.config import ModelConfig
from ragen_jax.models.tokenizer import Tokenizer
from ragen_jax.models.transformer import CausalLM

_TINY_VOCAB = 1119  # len(load_tiny_tokenizer()); checked by tests so the two cannot drift apart


def load_tiny_tokenizer() -> Tokenizer:
    """The committed byte-level BPE tokenizer in models/assets/tiny_tokenizer (Qwen-shaped chat template)."""
    return Tokenizer.from_folder(ASSET_DIR)


def tiny_config(**overrides: Any) -> ModelConfig:
    """A Qwen2-style config sized for fast RL on a CPU (0.5M parameters by default); fields overridable. A
    param_dtype without a dtype computes in the param dtype, as a loaded checkpoint does (`config_from_hf`)."""
    defaults: dict[str, Any] = dict(
        architecture="qwen2",
        vocab_size=_TINY_VOCAB,
        hidden_size=128,
        intermediate_size=384,
        num_layers=2,
        num_heads=4,
        num_kv_heads=2,
        head_dim=32,
        rope_theta=10000.0,
        rms_norm_eps=1e-6,
        tie_word_embeddings=True,
        attention_bias=True,
        max_position_embeddings=4096,
    )
    defaults.update(overrides)
    if "param_dtype" in overrides and "dtype" not in overrides:  # the compute dtype follows, as for a checkpoint
        defaults["dtype"] = overrides["param_dtype"]
    return ModelConfig(**defaults)


def make_tiny_model(seed: int = 0, **overrides: Any) -> tuple[CausalLM, Tokenizer]:
    """(randomly initialised tiny CausalLM, tiny tokenizer); overrides go to tiny_config."""
    tokenizer = load_tiny_tokenizer()
    config = tiny_config(**overrides)
    if config.vocab_size < len(tokenizer):
        raise ValueError(f"vocab_size={config.vocab_size} is smaller than the tiny tokenizer ({len(tokenizer)} ids).")
    return CausalLM(config, rngs=nnx.Rngs(seed)), tokenizer
