"""Qwen2.5-VL Hugging Face folders: load into `Qwen25VLModel` and export what transformers loads back.

Weights are named as the Hub's checkpoints name them (`visual.*`, `model.layers.*`, `lm_head.weight`), which is
also what transformers 5 writes; the names transformers 5 uses in memory (`model.visual.*`,
`model.language_model.*`) load too.
"""

from __future__ import annotations

import json
import os
from typing import Any, Mapping

from flax import nnx

from ragen_jax.models.hf import (load_tokenizer, load_weights, parse_config_json, untie_if_the_head_differs,
                                 token_ids, write_generation_config, write_training_record, write_weights)
from ragen_jax.models.hf_files import TensorHeader
from ragen_jax.models.tokenizer import Tokenizer
from ragen_jax.models.vision.config import VLConfig, vl_config_from_hf, vl_config_to_hf
from ragen_jax.models.vision.model import Qwen25VLModel

# Hub name prefix -> the prefix transformers 5's modules give the same tensor
_IN_MEMORY_PREFIX = {"visual.": "model.visual.", "model.": "model.language_model."}


def stored_name(name: str, found: Mapping[str, TensorHeader]) -> str:
    """The name `found` holds tensor `name` (Hub layout) under: itself, or transformers 5's in-memory name."""
    if name in found:
        return name
    for hub, memory in _IN_MEMORY_PREFIX.items():
        if name.startswith(hub) and memory + name[len(hub):] in found:
            return memory + name[len(hub):]
    return name


def read_vl_config(folder: str | os.PathLike, *, param_dtype: str | None = None,
                   dtype: str | None = None) -> VLConfig:
    """VLConfig from folder/config.json (model_type qwen2_5_vl), with optional dtype overrides; the language model
    untied where the checkpoint's own lm_head.weight differs from its embedding (as transformers loads it)."""
    folder = os.fspath(folder)
    config = parse_config_json(folder, lambda hf: vl_config_from_hf(hf, param_dtype=param_dtype, dtype=dtype),
                               param_dtype=param_dtype, dtype=dtype)
    return config.replace(text=untie_if_the_head_differs(folder, config.text))


def load_vl_model(folder: str | os.PathLike, *, param_dtype: str | None = None, dtype: str | None = None,
                  remat: str | None = None, seed: int = 0) -> Qwen25VLModel:
    """Qwen25VLModel from a local folder's config.json and safetensors (every tensor checked before any is read)."""
    folder = os.fspath(folder)
    config = read_vl_config(folder, param_dtype=param_dtype, dtype=dtype)
    if remat is not None:
        config = config.replace(text=config.text.replace(remat=remat))
    abstract = nnx.eval_shape(lambda: Qwen25VLModel(config, rngs=nnx.Rngs(seed)))
    return load_weights(abstract, folder, f"the Qwen2.5-VL model of {os.path.join(folder, 'config.json')}",
                        stored_name=stored_name, seed=seed)


def vl_from_pretrained(folder: str | os.PathLike, *, param_dtype: str | None = None,
                       dtype: str | None = None) -> tuple[Qwen25VLModel, Tokenizer]:
    """(model, tokenizer) from a local Qwen2.5-VL folder."""
    return load_vl_model(folder, param_dtype=param_dtype, dtype=dtype), load_tokenizer(folder)


def save_vl_pretrained(model: Qwen25VLModel, folder: str | os.PathLike, tokenizer: Tokenizer | None = None, *,
                       image_processor: Any = None, max_shard_bytes: int = 2 * 1024**3,
                       training_record: Mapping[str, Any] | None = None) -> None:
    """Writes config.json, safetensors (Hub names, sharded above max_shard_bytes), and the tokenizer and image
    processor files when given: a folder transformers loads as Qwen2_5_VLForConditionalGeneration."""
    from ragen_jax.models.lora import has_lora

    if has_lora(model):
        raise ValueError("save_vl_pretrained takes a model without LoRA adapters; merging adapters into a Qwen2.5-VL "
                         "model is not implemented yet.")
    folder = os.fspath(folder)
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, "config.json"), "w") as f:
        json.dump(vl_config_to_hf(model.vl_config, **token_ids(tokenizer)), f, indent=2, sort_keys=True)
    write_generation_config(folder, tokenizer)
    write_weights(model, folder, model.config.param_dtype, max_shard_bytes)
    if tokenizer is not None:
        tokenizer.save(folder)
    if image_processor is not None:
        image_processor.save_pretrained(folder)
    write_training_record(folder, training_record)
