"""Model configuration for the decoder-only LMs, and its mapping to/from Hugging Face config.json."""

from __future__ import annotations

import dataclasses
from typing import Any, Mapping

import jax.numpy as jnp

ARCHITECTURES = ("qwen2", "qwen3", "llama")
DTYPES = ("float32", "bfloat16")
REMAT_POLICIES = ("none", "full", "dots")
ROPE_TYPES = ("default", "llama3", "linear")
# the rope_scaling keys each RoPE type reads (transformers' names); a missing one is refused at load
ROPE_KEYS = {"default": (), "linear": ("factor",),
             "llama3": ("factor", "low_freq_factor", "high_freq_factor", "original_max_position_embeddings")}

# head_dim when config.json leaves it out, as transformers' config classes default it (None: hidden // heads)
_DEFAULT_HEAD_DIM = {"qwen2": None, "qwen3": 128, "llama": None}
_HF_CLASS = {"qwen2": "Qwen2ForCausalLM", "qwen3": "Qwen3ForCausalLM", "llama": "LlamaForCausalLM"}


@dataclasses.dataclass(frozen=True)
class ModelConfig:
    """Hyper-parameters of a Qwen2/2.5, Qwen3 or Llama 3.x style decoder (hashable: usable as a jit static)."""

    architecture: str
    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    rope_theta: float = 10000.0
    rope_scaling: tuple[tuple[str, Any], ...] | None = None
    rms_norm_eps: float = 1e-6
    tie_word_embeddings: bool = False
    attention_bias: bool = False
    qk_norm: bool = False
    max_position_embeddings: int = 32768
    param_dtype: str = "float32"
    dtype: str = "float32"
    remat: str = "none"

    def __post_init__(self) -> None:
        if self.architecture not in ARCHITECTURES:
            raise ValueError(
                f"Unsupported architecture {self.architecture!r}; supported: {', '.join(ARCHITECTURES)}."
            )
        for name in ("param_dtype", "dtype"):
            if getattr(self, name) not in DTYPES:
                raise ValueError(f"{name}={getattr(self, name)!r} is not supported; use one of {DTYPES}.")
        if self.remat not in REMAT_POLICIES:
            raise ValueError(f"remat={self.remat!r} is not supported; use one of {REMAT_POLICIES}.")
        if self.num_heads % self.num_kv_heads != 0:
            raise ValueError(
                f"num_heads ({self.num_heads}) must be a multiple of num_kv_heads ({self.num_kv_heads})."
            )
        if self.head_dim % 2 != 0:
            raise ValueError(f"head_dim must be even for RoPE, got {self.head_dim}.")
        rope_type = self.rope_params.get("rope_type", "default")
        if rope_type not in ROPE_TYPES:
            raise ValueError(f"rope_scaling type {rope_type!r} is not supported; supported: {ROPE_TYPES}.")
        missing = [k for k in ROPE_KEYS[rope_type] if self.rope_params.get(k) is None]
        if missing:
            raise ValueError(f"rope_scaling of type {rope_type!r} lacks {', '.join(missing)} (it needs "
                             f"{', '.join(ROPE_KEYS[rope_type])}); add them to config.json as the model's card gives "
                             "them.")

    @property
    def o_proj_bias(self) -> bool:
        """Whether the attention output projection has a bias: Llama's and Qwen3's follow `attention_bias` (as
        transformers'), Qwen2's never has one (its `attention_bias` covers q/k/v only)."""
        return self.attention_bias and self.architecture != "qwen2"

    @property
    def rope_params(self) -> dict[str, Any]:
        """rope_scaling as a dict ({} when absent)."""
        return dict(self.rope_scaling or ())

    @property
    def jnp_param_dtype(self) -> jnp.dtype:
        return jnp.dtype(self.param_dtype)

    @property
    def jnp_dtype(self) -> jnp.dtype:
        return jnp.dtype(self.dtype)

    def replace(self, **changes: Any) -> "ModelConfig":
        return dataclasses.replace(self, **changes)


def _freeze(value: Mapping[str, Any] | None) -> tuple[tuple[str, Any], ...] | None:
    if not value:
        return None
    return tuple(sorted((k, tuple(v) if isinstance(v, list) else v) for k, v in value.items()))


def _rope_parameters(hf: Mapping[str, Any]) -> dict[str, Any]:
    """The RoPE dict as transformers 5 reads it: a legacy `rope_scaling` replaces `rope_parameters` (it is not
    merged into it), and its `type` names the rope_type when `rope_type` is absent."""
    rope = dict(hf.get("rope_scaling") or hf.get("rope_parameters") or {})
    legacy_type = rope.pop("type", None)
    rope.setdefault("rope_type", legacy_type or "default")
    return rope


def sliding_layers(hf: Mapping[str, Any]) -> list[int]:
    """The layers whose attention a sliding window limits, as transformers 5 reads a Qwen2/Qwen3 config.json: none
    without `use_sliding_window` or with a window no sequence can pass; else those `layer_types` marks
    "sliding_attention", by default layers from `max_window_layers` on."""
    window = hf.get("sliding_window")
    num_layers = int(hf["num_hidden_layers"])
    if not hf.get("use_sliding_window", False) or window is None:
        return []
    if int(window) >= int(hf.get("max_position_embeddings", 32768)):
        return []
    types = hf.get("layer_types") or [
        "sliding_attention" if i >= int(hf.get("max_window_layers", num_layers)) else "full_attention"
        for i in range(num_layers)]
    return [i for i, kind in enumerate(types) if kind == "sliding_attention"]


def config_from_hf(hf: Mapping[str, Any], *, param_dtype: str | None = None, dtype: str | None = None) -> ModelConfig:
    """Builds a ModelConfig from a Hugging Face config.json dict (transformers 4.x and 5.x layouts)."""
    model_type = hf.get("model_type")
    if model_type == "qwen2_5_vl":
        raise ValueError("config.json describes a Qwen2.5-VL model (model_type 'qwen2_5_vl'); load it with "
                         "ragen_jax.models.vision.load_vl_model.")
    if model_type not in ARCHITECTURES:
        raise ValueError(
            f"config.json has model_type={model_type!r}, which ragen_jax cannot load; "
            f"supported model_type values: {', '.join(ARCHITECTURES)}."
        )
    act = hf.get("hidden_act", "silu")
    if act != "silu":
        raise ValueError(f"hidden_act={act!r} is not supported (only 'silu' SwiGLU MLPs).")
    if hf.get("mlp_bias", False):
        raise ValueError("mlp_bias=true is not supported (Llama MLPs without bias only).")
    sliding = sliding_layers(hf)
    if sliding:
        raise ValueError(
            f"config.json has use_sliding_window=true with sliding_window={hf.get('sliding_window')}, so layers "
            f"{sliding} attend only to that many past tokens; ragen_jax attends to the whole context in every layer. "
            "Set use_sliding_window to false in config.json (the same model for contexts up to sliding_window tokens).")
    hidden, heads = int(hf["hidden_size"]), int(hf["num_attention_heads"])
    head_dim = hf.get("head_dim") or _DEFAULT_HEAD_DIM[model_type] or hidden // heads
    rope = _rope_parameters(hf)
    theta = float(rope.pop("rope_theta", hf.get("rope_theta", 10000.0)))
    partial = float(rope.pop("partial_rotary_factor", hf.get("partial_rotary_factor", 1.0)) or 1.0)
    if rope.get("rope_type", "default") == "default":
        rope = {}  # transformers' default RoPE for these families rotates the whole head_dim whatever the factor
    elif partial != 1.0:
        raise ValueError(
            f"config.json asks for {rope['rope_type']!r} RoPE scaling with partial_rotary_factor={partial:g}: the "
            f"scaled frequencies would cover {partial:g} of head_dim, which {model_type} attention does not support "
            "(transformers fails on it too). Remove partial_rotary_factor from config.json or set it to 1.0.")
    torch_dtype = hf.get("torch_dtype") or hf.get("dtype") or "float32"
    native = torch_dtype if torch_dtype in DTYPES else "float32"
    return ModelConfig(
        architecture=model_type,
        vocab_size=int(hf["vocab_size"]),
        hidden_size=hidden,
        intermediate_size=int(hf["intermediate_size"]),
        num_layers=int(hf["num_hidden_layers"]),
        num_heads=heads,
        num_kv_heads=int(hf.get("num_key_value_heads") or heads),
        head_dim=int(head_dim),
        rope_theta=theta,
        rope_scaling=_freeze(rope),
        rms_norm_eps=float(hf.get("rms_norm_eps", 1e-6)),
        tie_word_embeddings=bool(hf.get("tie_word_embeddings", False)),
        attention_bias=model_type == "qwen2" or bool(hf.get("attention_bias", False)),
        qk_norm=model_type == "qwen3",
        max_position_embeddings=int(hf.get("max_position_embeddings", 32768)),
        param_dtype=param_dtype or native,
        dtype=dtype or param_dtype or native,
    )


def config_to_hf(config: ModelConfig, **extra: Any) -> dict[str, Any]:
    """A config.json dict that transformers (4.x and 5.x) and vLLM load for this architecture."""
    rope = config.rope_params
    out: dict[str, Any] = {
        "architectures": [_HF_CLASS[config.architecture]],
        "model_type": config.architecture,
        "vocab_size": config.vocab_size,
        "hidden_size": config.hidden_size,
        "intermediate_size": config.intermediate_size,
        "num_hidden_layers": config.num_layers,
        "num_attention_heads": config.num_heads,
        "num_key_value_heads": config.num_kv_heads,
        "head_dim": config.head_dim,
        "hidden_act": "silu",
        "rms_norm_eps": config.rms_norm_eps,
        "rope_theta": config.rope_theta,
        "rope_scaling": {**rope, "rope_type": rope.get("rope_type", "default")} if rope else None,
        "rope_parameters": {"rope_theta": config.rope_theta, "rope_type": "default", **rope},
        "tie_word_embeddings": config.tie_word_embeddings,
        "max_position_embeddings": config.max_position_embeddings,
        "torch_dtype": config.param_dtype,
        "use_cache": True,
    }
    if config.architecture == "qwen2":
        out.update(use_sliding_window=False, sliding_window=None, max_window_layers=config.num_layers)
    else:
        out["attention_bias"] = config.attention_bias
    if config.architecture == "llama":
        out["mlp_bias"] = False
    out.update(extra)
    return out
