"""Hugging Face checkpoint folders: memory-mapped safetensors load into NNX models, and HF-compatible export."""

from __future__ import annotations

import json
import logging
import os
from contextlib import ExitStack
from typing import Any, Callable, Mapping

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx
from safetensors import safe_open

from ragen_jax.errors import MissingFileError
from ragen_jax.models.config import DTYPES, ModelConfig, config_from_hf, config_to_hf
from ragen_jax.models.hf_files import (INDEX, SINGLE, TRAINING_RECORD, CheckpointError, ExpectedTensor, TensorHeader,
                                      check_tensors, checkpoint_tensors, stale_weight_files)
from ragen_jax.models.tokenizer import Tokenizer
from ragen_jax.models.transformer import CausalLM, ValueModel


log = logging.getLogger(__name__)
_COMPARE_BYTES = 64 * 2**20  # rows of the output head and the embedding compared at a time


def hf_name(path: tuple[Any, ...]) -> tuple[str, bool]:
    """Maps an NNX state path to (HF tensor name, whether the tensor is a transposed Linear weight)."""
    *parents, leaf = (str(p) for p in path)
    if leaf == "kernel":
        return ".".join(parents + ["weight"]), True
    if leaf == "embedding":
        return ".".join(parents + ["weight"]), False
    return ".".join(parents + [leaf]), False


def read_config(folder: str | os.PathLike, *, param_dtype: str | None = None, dtype: str | None = None,
                untie: bool = True) -> ModelConfig:
    """ModelConfig from folder/config.json, with optional parameter/compute dtype overrides (with `untie`, untied
    where the checkpoint's own lm_head.weight differs from the embedding, as transformers loads it: that compares
    tensor data, which `load_model` does only once every header has been checked)."""
    folder = os.fspath(folder)
    config = parse_config_json(folder, lambda hf: config_from_hf(hf, param_dtype=param_dtype, dtype=dtype),
                               param_dtype=param_dtype, dtype=dtype)
    return untie_if_the_head_differs(folder, config) if untie else config


def parse_config_json(folder: str, parse: Callable[[dict], Any], *, param_dtype: str | None = None,
                      dtype: str | None = None) -> Any:
    """parse(folder/config.json as a dict), every problem (a missing folder or file, bad JSON, a missing key, a
    value `parse` refuses, a dtype override outside DTYPES) raised as one error naming the file."""
    if not os.path.isdir(folder):
        raise MissingFileError(f"Checkpoint folder {folder!r} does not exist; pass a local Hugging Face model folder.")
    path = os.path.join(folder, "config.json")
    if not os.path.isfile(path):
        raise MissingFileError(f"{path} is missing; a Hugging Face model folder needs config.json next to its "
                                "safetensors.")
    for name, value in (("param_dtype", param_dtype), ("dtype", dtype)):
        if value is not None and value not in DTYPES:
            raise ValueError(f"{name}={value!r} cannot be honoured; choose one of {DTYPES}.")
    with open(path) as f:
        try:
            hf = json.load(f)
        except ValueError as e:
            raise CheckpointError(f"{path} is not valid JSON ({e}); download it again or fix it.") from None
    if not isinstance(hf, dict):
        raise CheckpointError(f"{path} holds a {type(hf).__name__}, not a JSON object; download it again or fix it.")
    try:
        return parse(hf)
    except KeyError as e:  # CheckpointError: run.py shows the model folder's problems as one line
        raise CheckpointError(f"{path} lacks the required key {e.args[0]!r}.") from e
    except ValueError as e:
        raise CheckpointError(f"{path}: {e}") from e


def untie_if_the_head_differs(folder: str, config: ModelConfig) -> ModelConfig:
    """config untied when it ties the embeddings but the folder's checkpoint holds an lm_head.weight of its own
    (as transformers loads it); a folder without weights is left to the loader to report."""
    if not config.tie_word_embeddings:
        return config
    try:
        found, _ = checkpoint_tensors(folder)
    except FileNotFoundError:
        return config
    if not head_differs_from_embedding(found):
        return config
    log.warning("%s: tie_word_embeddings is true but lm_head.weight differs from model.embed_tokens.weight; "
                "using the checkpoint's lm_head untied, as transformers does.", folder)
    return config.replace(tie_word_embeddings=False)


def _fresh_param(path: tuple[Any, ...], abstract: jax.ShapeDtypeStruct, seed: int) -> jax.Array:
    """Initial value for a parameter the checkpoint may lack (the critic's value head)."""
    if path[-1] == "kernel":
        key = jax.random.key(seed)
        return (0.02 * jax.random.normal(key, abstract.shape, jnp.float32)).astype(abstract.dtype)
    return jnp.zeros(abstract.shape, abstract.dtype)


def load_model(
    folder: str | os.PathLike,
    *,
    param_dtype: str | None = None,
    dtype: str | None = None,
    model_cls: type = CausalLM,
    remat: str | None = None,
    seed: int = 0,
) -> CausalLM | ValueModel:
    """Builds model_cls from config.json and fills it tensor by tensor from memory-mapped safetensors.

    Every tensor's presence, shape and dtype is checked from the safetensors headers before any
    weight is read. Dtypes default to the checkpoint's (float32 if it is not float32/bfloat16). A
    ValueModel loads the backbone and, when present, `score.weight/bias`; otherwise its head is
    freshly initialised. A checkpoint whose config ties the embeddings but which holds a different
    `lm_head.weight` loads untied, as in transformers (decided after the headers passed).
    """
    folder = os.fspath(folder)
    config = read_config(folder, param_dtype=param_dtype, dtype=dtype, untie=False)
    if remat is not None:
        config = config.replace(remat=remat)
    what = f"the {config.architecture} model of {os.path.join(folder, 'config.json')}"

    def optional(path: tuple[Any, ...]) -> bool:
        return model_cls is ValueModel and path[0] == "score"

    abstract = nnx.eval_shape(lambda: model_cls(config, rngs=nnx.Rngs(seed)))
    check_weights(abstract, folder, what, optional=optional)
    untied = untie_if_the_head_differs(folder, config)  # compares tensor data: only once every header passed
    if untied != config:
        abstract = nnx.eval_shape(lambda: model_cls(untied, rngs=nnx.Rngs(seed)))
    return load_weights(abstract, folder, what, optional=optional, seed=seed)


def check_weights(abstract: nnx.Module, folder: str, what: str, *,
                  optional: Callable[[tuple[Any, ...]], bool] = lambda path: False,
                  stored_name: Callable[[str, Mapping[str, TensorHeader]], str] = lambda name, found: name
                  ) -> tuple[Any, list, dict]:
    """Check every tensor an abstract model (`nnx.eval_shape`) needs against the folder's safetensors headers
    (presence, shape, dtype; no tensor data is read) -> (graphdef, [(path, abstract variable, stored name,
    transposed)], the checkpoint's tensors). `what` names the model in the error; a parameter at a path `optional`
    accepts may be missing; `stored_name(hf name, the checkpoint's tensors)` gives the name a tensor is stored under
    when a layout renames it."""
    found, listing = checkpoint_tensors(folder)
    graphdef, abs_state = nnx.split(abstract)
    needed = []
    for path, var in nnx.to_flat_state(abs_state):
        name, transposed = hf_name(path)
        needed.append((path, var, stored_name(name, found), transposed))
    expected = {name: ExpectedTensor(_hf_shape(var.get_value(), transposed), optional=optional(path))
                for path, var, name, transposed in needed}
    check_tensors(expected, found, listing, what)
    return graphdef, needed, found


def load_weights(abstract: nnx.Module, folder: str, what: str, *,
                 optional: Callable[[tuple[Any, ...]], bool] = lambda path: False,
                 stored_name: Callable[[str, Mapping[str, TensorHeader]], str] = lambda name, found: name,
                 seed: int = 0) -> nnx.Module:
    """An abstract model (`nnx.eval_shape`) filled tensor by tensor from the folder's memory-mapped safetensors,
    once `check_weights` passed (a parameter `optional` accepts and the checkpoint lacks is freshly initialised)."""
    graphdef, needed, found = check_weights(abstract, folder, what, optional=optional, stored_name=stored_name)
    flat = []
    with ExitStack() as stack:
        handles: dict[str, Any] = {}
        for path, var, name, transposed in needed:
            spec = var.get_value()
            if name not in found:  # an optional tensor (the critic's value head)
                flat.append((path, var.replace(_fresh_param(path, spec, seed))))
                continue
            fname = found[name].file
            if fname not in handles:
                handles[fname] = stack.enter_context(safe_open(fname, framework="numpy"))
            flat.append((path, var.replace(_read_tensor(handles[fname], name, spec, transposed))))
    state = nnx.from_flat_state(flat)
    return nnx.merge(graphdef, state)


def head_differs_from_embedding(found: dict[str, TensorHeader]) -> bool:
    """Whether the checkpoint holds an `lm_head.weight` [V, D] that is not equal to `model.embed_tokens.weight`:
    transformers then leaves the two untied whatever config.json says. Compared a block of rows at a time from
    the memory-mapped files (neither tensor is read whole)."""
    head, embed = found.get("lm_head.weight"), found.get("model.embed_tokens.weight")
    if head is None or embed is None or head.shape != embed.shape or len(head.shape) != 2:
        return False  # nothing to untie (a head of another shape is not the embedding's)
    rows = max(1, _COMPARE_BYTES // (4 * max(1, head.shape[1])))
    with safe_open(head.file, framework="numpy") as h, safe_open(embed.file, framework="numpy") as e:
        head_rows, embed_rows = h.get_slice("lm_head.weight"), e.get_slice("model.embed_tokens.weight")
        for i in range(0, head.shape[0], rows):
            end = min(i + rows, head.shape[0])  # safetensors refuses a slice past the end
            a = np.asarray(head_rows[i:end], np.float32)
            b = np.asarray(embed_rows[i:end], np.float32)
            if not np.array_equal(a, b):
                return True
    return False


def _hf_shape(spec: jax.ShapeDtypeStruct, transposed: bool) -> tuple[int, ...]:
    """The checkpoint (PyTorch-layout) shape of a parameter."""
    return tuple(spec.shape[::-1]) if transposed else tuple(spec.shape)


def _read_tensor(handle: Any, name: str, spec: jax.ShapeDtypeStruct, transposed: bool) -> jax.Array:
    """Reads one tensor (memory-mapped; checked against the header already), transposes Linear weights, casts."""
    arr = handle.get_tensor(name)
    if transposed:
        arr = arr.T
    out = jnp.asarray(arr, dtype=spec.dtype)
    del arr
    return out


def load_tokenizer(folder: str | os.PathLike) -> Tokenizer:
    """The folder's tokenizer through transformers' AutoTokenizer (chat template included)."""
    return Tokenizer.from_folder(folder)


def from_pretrained(
    folder: str | os.PathLike,
    *,
    param_dtype: str | None = None,
    dtype: str | None = None,
    model_cls: type = CausalLM,
    remat: str | None = None,
) -> tuple[CausalLM | ValueModel, Tokenizer]:
    """(model, tokenizer) from a local Hugging Face folder (config.json, safetensors, tokenizer files). The
    tokenizer loads first: a folder without one is refused before any weight is read."""
    tokenizer = load_tokenizer(folder)
    return load_model(folder, param_dtype=param_dtype, dtype=dtype, model_cls=model_cls, remat=remat), tokenizer


def _shard_plan(model: nnx.Module, dtype: str, max_shard_bytes: int) -> list[list[tuple[Any, ...]]]:
    """Parameter paths grouped into shards of at most max_shard_bytes (a bigger tensor gets its own)."""
    itemsize = jnp.dtype(dtype).itemsize
    shards: list[list[tuple[Any, ...]]] = [[]]
    size = 0
    for path, var in nnx.to_flat_state(nnx.state(model, nnx.Param)):
        nbytes = int(np.prod(var.get_value().shape)) * itemsize
        if shards[-1] and size + nbytes > max_shard_bytes:
            shards.append([])
            size = 0
        shards[-1].append(path)
        size += nbytes
    return shards


def _export_tensor(var: Any, path: tuple[Any, ...], dtype: str) -> tuple[str, np.ndarray]:
    """(HF name, numpy tensor in PyTorch layout and the given dtype) of one parameter."""
    name, transposed = hf_name(path)
    arr = np.asarray(jax.device_get(var.get_value())).astype(jnp.dtype(dtype))
    return name, np.ascontiguousarray(arr.T if transposed else arr)


def save_pretrained(
    model: CausalLM | ValueModel,
    folder: str | os.PathLike,
    tokenizer: Tokenizer | None = None,
    *,
    max_shard_bytes: int = 2 * 1024**3,
    training_record: Mapping[str, Any] | None = None,
) -> None:
    """Writes config.json + safetensors (sharded above max_shard_bytes) + tokenizer files, loadable by
    transformers/vLLM.

    LoRA adapters are merged into a copy first; the original model is left untouched. Weight files of an earlier
    save in folder that this one does not rewrite (a single file, an index, other shards) are removed.
    `training_record` (JSON, e.g. {"rl_steps": 12}) goes to `TRAINING_RECORD`; without one, an earlier save's
    record is removed (it described other weights).
    """
    from ragen_jax.models.lora import has_lora, merged_copy

    if has_lora(model):
        model = merged_copy(model)
    config: ModelConfig = model.config
    if config.architecture == "qwen2" and not config.attention_bias:
        raise ValueError("transformers' Qwen2 always has q/k/v biases; set attention_bias=True for qwen2 models.")
    folder = os.fspath(folder)
    os.makedirs(folder, exist_ok=True)
    extra = token_ids(tokenizer)
    hf_cfg = config_to_hf(config, **extra)
    if isinstance(model, ValueModel):
        hf_cfg["architectures"] = [hf_cfg["architectures"][0].replace("CausalLM", "TokenClassification")]
        hf_cfg["num_labels"] = 1
    with open(os.path.join(folder, "config.json"), "w") as f:
        json.dump(hf_cfg, f, indent=2, sort_keys=True)
    write_generation_config(folder, tokenizer)
    write_weights(model, folder, config.param_dtype, max_shard_bytes)
    if tokenizer is not None:
        tokenizer.save(folder)
    write_training_record(folder, training_record)


def token_ids(tokenizer: Tokenizer | None) -> dict[str, Any]:
    """config.json's bos/eos/pad ids from the tokenizer ({} without one)."""
    if tokenizer is None:
        return {}
    eos = tokenizer.eos_token_ids
    return {"eos_token_id": eos[0] if len(eos) == 1 else list(eos), "pad_token_id": tokenizer.pad_token_id,
            "bos_token_id": tokenizer.hf.bos_token_id}


def write_generation_config(folder: str, tokenizer: Tokenizer | None) -> None:
    """generation_config.json for transformers' generate and vLLM: the source checkpoint's sampling defaults (as
    veRL's export keeps them), stopping at every eos id; nothing without a tokenizer."""
    extra = token_ids(tokenizer)
    if not extra:
        return
    gen = dict(tokenizer.generation_defaults)
    gen.update({k: extra[k] for k in ("bos_token_id", "eos_token_id", "pad_token_id") if extra.get(k) is not None})
    with open(os.path.join(folder, "generation_config.json"), "w") as f:
        json.dump(gen, f, indent=2, sort_keys=True)


def write_training_record(folder: str, training_record: Mapping[str, Any] | None) -> None:
    """Writes `TRAINING_RECORD`, or removes an earlier save's (it described other weights) when there is none."""
    record_path = os.path.join(folder, TRAINING_RECORD)
    if training_record is not None:
        with open(record_path, "w") as f:
            json.dump(dict(training_record), f, indent=2, sort_keys=True)
    elif os.path.exists(record_path):
        os.remove(record_path)


def write_weights(model: nnx.Module, folder: str, dtype: str, max_shard_bytes: int) -> None:
    """Every nnx.Param of the model as safetensors under its HF name (PyTorch layout, `dtype`), sharded above
    max_shard_bytes with an index; weight files of an earlier save that this one does not rewrite are removed."""
    from safetensors.numpy import save_file

    params = dict(nnx.to_flat_state(nnx.state(model, nnx.Param)))
    plan = _shard_plan(model, dtype, max_shard_bytes)
    names = [SINGLE] if len(plan) == 1 else [
        f"model-{i + 1:05d}-of-{len(plan):05d}.safetensors" for i in range(len(plan))
    ]
    for stale in stale_weight_files(os.listdir(folder), names + ([INDEX] if len(plan) > 1 else [])):
        os.remove(os.path.join(folder, stale))  # an earlier save's weights, which a loader could read instead
    weight_map, total = {}, 0
    for fname, paths in zip(names, plan):
        shard = dict(_export_tensor(params[p], p, dtype) for p in paths)
        save_file(shard, os.path.join(folder, fname), metadata={"format": "pt"})
        weight_map.update({name: fname for name in shard})
        total += sum(a.nbytes for a in shard.values())
        del shard
    if len(plan) > 1:
        with open(os.path.join(folder, INDEX), "w") as f:
            json.dump({"metadata": {"total_size": total}, "weight_map": weight_map}, f, indent=2, sort_keys=True)
