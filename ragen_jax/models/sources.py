"""Where a run's model comes from: a local folder, a hub id in the local Hugging Face cache, or the tiny preset;
and its ModelConfig without reading any weight (what the memory planner and --print_config need)."""

from __future__ import annotations

import os

from ragen_jax.errors import ModelNotFoundError


def _looks_like_a_path(path: str) -> bool:
    """A filesystem path rather than a hub id ("org/name"): absolute, relative (./, ../, ~), or deeper."""
    return path.startswith(("/", ".", "~")) or path.count("/") > 1 or os.sep != "/" and os.sep in path


def resolve_model_path(path: str) -> str:
    """A local folder, or a hub id already in the local Hugging Face cache."""
    if os.path.isdir(path):
        return path
    if _looks_like_a_path(path):  # a hub id is "org/name"; this names a folder, which is missing
        raise ModelNotFoundError(
            f"Model folder {path!r} does not exist. Point --config.model.path at a folder holding config.json and "
            "the safetensors, give a Hugging Face id in the local cache (e.g. Qwen/Qwen2.5-3B-Instruct), or run "
            "the `:tiny` variant, which needs no files.")
    try:
        from huggingface_hub import snapshot_download

        return snapshot_download(path, local_files_only=True)
    except Exception:  # noqa: BLE001 - any failure means "not available offline"
        raise ModelNotFoundError(
            f"Model {path!r} is neither a local folder nor in the local Hugging Face cache. Download it "
            f"first, e.g. `hf download {path}` (or point --config.model.path at a local folder), or run "
            "the `:tiny` variant, which needs no files."
        ) from None


def model_config_for(model_cfg):
    """The policy's ModelConfig without loading weights (the tiny preset's, or the folder's config.json)."""
    from ragen_jax.models.hf import read_config
    from ragen_jax.models.tiny import tiny_config

    dtype_kwargs = {k: model_cfg[k] for k in ("param_dtype", "dtype") if model_cfg[k]}
    if model_cfg.preset in ("tiny", "tiny_vision"):  # the vision preset's language model is the tiny one
        overrides = {"vocab_size": 1152} if model_cfg.preset == "tiny_vision" else {}
        return tiny_config(**dict(model_cfg.tiny), **dtype_kwargs, remat=model_cfg.remat, **overrides)
    return read_config(resolve_model_path(model_cfg.path), **dtype_kwargs).replace(remat=model_cfg.remat)
