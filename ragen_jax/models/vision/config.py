"""Qwen2.5-VL configuration: the vision tower's hyper-parameters, the multimodal model around a Qwen2 decoder, and
their mapping to/from Hugging Face config.json (model_type "qwen2_5_vl", flat or nested text_config layouts)."""

from __future__ import annotations

import dataclasses
from typing import Any, Mapping

from ragen_jax.models.config import ModelConfig, config_from_hf, config_to_hf

MODEL_TYPE = "qwen2_5_vl"
HF_CLASS = "Qwen2_5_VLForConditionalGeneration"
# The ids of Qwen2.5-VL's own tokenizer (config.json defaults when a key is absent, as transformers').
_DEFAULT_IDS = {"image_token_id": 151655, "video_token_id": 151656, "vision_start_token_id": 151652,
                "vision_end_token_id": 151653}
# Text keys of a flat (pre-text_config) config.json that describe the language model.
_VISION_ONLY_KEYS = ("vision_config", "image_token_id", "video_token_id", "vision_start_token_id",
                     "vision_end_token_id", "vision_token_id", "text_config", "architectures")


@dataclasses.dataclass(frozen=True)
class VisionConfig:
    """Hyper-parameters of Qwen2.5-VL's vision tower (transformers' Qwen2_5_VLVisionConfig names)."""

    depth: int
    hidden_size: int
    intermediate_size: int
    num_heads: int
    out_hidden_size: int
    in_channels: int = 3
    patch_size: int = 14
    temporal_patch_size: int = 2
    spatial_merge_size: int = 2
    window_size: int = 112
    fullatt_block_indexes: tuple[int, ...] = (7, 15, 23, 31)
    tokens_per_second: int = 2
    rope_theta: float = 10000.0
    rms_norm_eps: float = 1e-6

    def __post_init__(self) -> None:
        if self.hidden_size % self.num_heads:
            raise ValueError(f"vision hidden_size ({self.hidden_size}) must be a multiple of num_heads "
                             f"({self.num_heads}).")
        if self.head_dim % 4:
            raise ValueError(f"vision head_dim ({self.head_dim}) must be a multiple of 4: its 2-D rotary embedding "
                             "gives a quarter of it to each of the row and column frequencies.")
        bad = [i for i in self.fullatt_block_indexes if not 0 <= i < self.depth]
        if bad:
            raise ValueError(f"fullatt_block_indexes {bad} lie outside the {self.depth} vision blocks.")
        if self.window_merge_units < 1:
            raise ValueError(f"window_size ({self.window_size}) must be at least patch_size * spatial_merge_size "
                             f"({self.patch_size * self.spatial_merge_size}) pixels.")

    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.num_heads

    @property
    def patch_features(self) -> int:
        """Values per patch as the image processor flattens it: channels x temporal x patch x patch."""
        return self.in_channels * self.temporal_patch_size * self.patch_size ** 2

    @property
    def merge_unit(self) -> int:
        """Patches merged into one language-model token."""
        return self.spatial_merge_size ** 2

    @property
    def window_merge_units(self) -> int:
        """Side of an attention window in merged tokens (window_size pixels // merge // patch)."""
        return self.window_size // self.spatial_merge_size // self.patch_size


@dataclasses.dataclass(frozen=True)
class VLConfig:
    """A Qwen2.5-VL model: the Qwen2 language model (`text`), the vision tower, M-RoPE's split of the rotary
    frequencies over the (temporal, height, width) position streams, and the vision token ids."""

    text: ModelConfig
    vision: VisionConfig
    mrope_section: tuple[int, int, int]
    image_token_id: int = _DEFAULT_IDS["image_token_id"]
    video_token_id: int = _DEFAULT_IDS["video_token_id"]
    vision_start_token_id: int = _DEFAULT_IDS["vision_start_token_id"]
    vision_end_token_id: int = _DEFAULT_IDS["vision_end_token_id"]

    def __post_init__(self) -> None:
        if self.text.architecture != "qwen2":
            raise ValueError(f"Qwen2.5-VL's language model is a qwen2 decoder, got {self.text.architecture!r}.")
        if len(self.mrope_section) != 3 or sum(self.mrope_section) != self.text.head_dim // 2:
            raise ValueError(f"mrope_section {list(self.mrope_section)} must be 3 numbers summing to head_dim // 2 = "
                             f"{self.text.head_dim // 2} (the rotary frequencies each position stream drives).")
        if self.vision.out_hidden_size != self.text.hidden_size:
            raise ValueError(f"The vision tower's out_hidden_size ({self.vision.out_hidden_size}) must equal the "
                             f"language model's hidden_size ({self.text.hidden_size}).")
        for name in ("image_token_id", "vision_start_token_id", "vision_end_token_id"):
            if not 0 <= getattr(self, name) < self.text.vocab_size:
                raise ValueError(f"{name}={getattr(self, name)} lies outside the vocabulary of "
                                 f"{self.text.vocab_size}.")

    def replace(self, **changes: Any) -> "VLConfig":
        return dataclasses.replace(self, **changes)


def vision_config_from_hf(hf: Mapping[str, Any]) -> VisionConfig:
    """VisionConfig from config.json's vision_config (its older key names in_chans / spatial_patch_size too)."""
    act = hf.get("hidden_act", "silu")
    if act != "silu":
        raise ValueError(f"vision_config.hidden_act={act!r} is not supported (Qwen2.5-VL's SwiGLU uses 'silu').")
    rope = hf.get("rope_parameters") or {}
    return VisionConfig(
        depth=int(hf["depth"]), hidden_size=int(hf["hidden_size"]), intermediate_size=int(hf["intermediate_size"]),
        num_heads=int(hf["num_heads"]), out_hidden_size=int(hf["out_hidden_size"]),
        in_channels=int(hf.get("in_channels", hf.get("in_chans", 3))),
        patch_size=int(hf.get("patch_size", hf.get("spatial_patch_size", 14))),
        temporal_patch_size=int(hf.get("temporal_patch_size", 2)),
        spatial_merge_size=int(hf.get("spatial_merge_size", 2)), window_size=int(hf.get("window_size", 112)),
        fullatt_block_indexes=tuple(int(i) for i in hf.get("fullatt_block_indexes", (7, 15, 23, 31))),
        tokens_per_second=int(hf.get("tokens_per_second", 2)),
        rope_theta=float(rope.get("rope_theta", 10000.0)),
    )


def _text_dict(hf: Mapping[str, Any]) -> dict[str, Any]:
    """The language model's keys: text_config (transformers 5's layout) or the top level (the Hub checkpoints')."""
    nested = hf.get("text_config")
    text = dict(nested) if isinstance(nested, Mapping) else {k: v for k, v in hf.items() if k not in _VISION_ONLY_KEYS}
    if "tie_word_embeddings" in hf:  # the root value is the one transformers 5 reads; a text_config True also ties
        text["tie_word_embeddings"] = bool(hf["tie_word_embeddings"]) or bool(text.get("tie_word_embeddings"))
    for key in ("torch_dtype", "dtype"):
        if text.get(key) is None and hf.get(key) is not None:
            text[key] = hf[key]
    return text


def mrope_section_from_hf(text: Mapping[str, Any]) -> tuple[int, int, int]:
    """M-RoPE's mrope_section from rope_scaling / rope_parameters (Qwen2.5-VL's [16, 24, 24] when absent)."""
    rope = text.get("rope_scaling") or text.get("rope_parameters") or {}
    return tuple(int(s) for s in rope.get("mrope_section", (16, 24, 24)))  # type: ignore[return-value]


def vl_config_from_hf(hf: Mapping[str, Any], *, param_dtype: str | None = None, dtype: str | None = None) -> VLConfig:
    """VLConfig from a Qwen2.5-VL config.json dict (model_type "qwen2_5_vl")."""
    if hf.get("model_type") != MODEL_TYPE:
        raise ValueError(f"config.json has model_type={hf.get('model_type')!r}; a Qwen2.5-VL checkpoint has "
                         f"model_type {MODEL_TYPE!r}.")
    if not isinstance(hf.get("vision_config"), Mapping):
        raise ValueError("config.json has no vision_config object; a Qwen2.5-VL checkpoint describes its vision "
                         "tower there.")
    text = _text_dict(hf)
    section = mrope_section_from_hf(text)
    rope = dict(text.get("rope_scaling") or text.get("rope_parameters") or {})
    theta = rope.get("rope_theta", text.get("rope_theta", 1000000.0))
    qwen2 = {k: v for k, v in text.items() if k not in ("rope_scaling", "rope_parameters", "model_type")}
    qwen2.update(model_type="qwen2", rope_theta=theta)
    qwen2.setdefault("rms_norm_eps", 1e-5)  # transformers' Qwen2_5_VLTextConfig default
    qwen2.pop("head_dim", None)  # transformers' Qwen2.5-VL attention always uses hidden_size // num_heads
    lm = config_from_hf(qwen2, param_dtype=param_dtype, dtype=dtype)
    ids = {k: int(hf.get(k, text.get(k, v))) for k, v in _DEFAULT_IDS.items()}
    return VLConfig(text=lm, vision=vision_config_from_hf(hf["vision_config"]), mrope_section=section, **ids)


def vl_config_to_hf(config: VLConfig, **text_extra: Any) -> dict[str, Any]:
    """A config.json dict in transformers 5's nested layout (text_config, vision_config), which transformers loads
    as Qwen2_5_VLForConditionalGeneration; `text_extra` (token ids) goes to text_config."""
    text = config_to_hf(config.text, **text_extra)
    text.pop("architectures")
    text.pop("rope_scaling")
    text.update(model_type="qwen2_5_vl_text", rope_parameters={"rope_type": "default", "rope_theta":
                                                              config.text.rope_theta,
                                                              "mrope_section": list(config.mrope_section)})
    v = config.vision
    vision = {"model_type": "qwen2_5_vl_vision", "depth": v.depth, "hidden_size": v.hidden_size,
              "intermediate_size": v.intermediate_size, "num_heads": v.num_heads, "out_hidden_size": v.out_hidden_size,
              "in_channels": v.in_channels, "patch_size": v.patch_size, "temporal_patch_size": v.temporal_patch_size,
              "spatial_merge_size": v.spatial_merge_size, "window_size": v.window_size,
              "fullatt_block_indexes": list(v.fullatt_block_indexes), "tokens_per_second": v.tokens_per_second,
              "hidden_act": "silu", "rope_parameters": {"rope_type": "axial", "rope_theta": v.rope_theta}}
    return {"architectures": [HF_CLASS], "model_type": MODEL_TYPE, "text_config": text, "vision_config": vision,
            "tie_word_embeddings": config.text.tie_word_embeddings, "torch_dtype": config.text.param_dtype,
            "image_token_id": config.image_token_id, "video_token_id": config.video_token_id,
            "vision_start_token_id": config.vision_start_token_id, "vision_end_token_id": config.vision_end_token_id}


def qwen2_5_vl_3b_config(**text_overrides: Any) -> VLConfig:
    """The shapes of Qwen/Qwen2.5-VL-3B-Instruct (its config.json), for planning without the checkpoint; overrides
    go to the language model's ModelConfig."""
    text = ModelConfig(**{**dict(architecture="qwen2", vocab_size=151936, hidden_size=2048, intermediate_size=11008,
                                 num_layers=36, num_heads=16, num_kv_heads=2, head_dim=128, rope_theta=1000000.0,
                                 tie_word_embeddings=True, attention_bias=True, max_position_embeddings=128000,
                                 param_dtype="bfloat16", dtype="bfloat16"), **text_overrides})
    vision = VisionConfig(depth=32, hidden_size=1280, intermediate_size=3420, num_heads=16, out_hidden_size=2048)
    return VLConfig(text=text, vision=vision, mrope_section=(16, 24, 24))
