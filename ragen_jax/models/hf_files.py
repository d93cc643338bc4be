"""What a Hugging Face checkpoint folder holds, read from its safetensors headers alone (no tensor data).

`checkpoint_tensors` lists every tensor's dtype, shape and file (single-file or sharded), and
`check_tensors` compares them with what a model needs, so a wrong or missing tensor is reported
before any weight is read, all at once, each with its file.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
from ragen_jax.errors import MissingFileError, RagenError
from typing import Iterable, Mapping

INDEX = "model.safetensors.index.json"
SINGLE = "model.safetensors"
TRAINING_RECORD = "ragen_jax_training.json"  # what training wrote these weights (the trainer's export), e.g. rl_steps
_SHARD = re.compile(r"model-\d{5}-of-\d{5}\.safetensors")  # a shard's name, as transformers writes it
# Checkpoint dtypes the loader converts (safetensors names -> numpy/JAX names).
LOADABLE_DTYPES = {"F32": "float32", "BF16": "bfloat16", "F16": "float16", "F64": "float64"}
_MAX_HEADER_BYTES = 100 * 1024 * 1024  # the safetensors format's own limit
_MAX_LISTED = 20


class CheckpointError(RagenError, ValueError):
    """A checkpoint's files are damaged or do not fit the model its config.json describes."""


@dataclasses.dataclass(frozen=True)
class TensorHeader:
    """One tensor as a safetensors header describes it: dtype name ("BF16"), shape, and its file."""

    dtype: str
    shape: tuple[int, ...]
    file: str


@dataclasses.dataclass(frozen=True)
class ExpectedTensor:
    """What the model needs under one checkpoint name: the shape in PyTorch layout, and whether it may be absent."""

    shape: tuple[int, ...]
    optional: bool = False


def read_header(path: str) -> dict[str, TensorHeader]:
    """Tensor name -> header for one .safetensors file; checks that the data the header promises is there."""
    size = os.path.getsize(path)
    with open(path, "rb") as f:
        prefix = f.read(8)
        header_bytes = int.from_bytes(prefix, "little") if len(prefix) == 8 else -1
        if not 0 < header_bytes <= min(size - 8, _MAX_HEADER_BYTES):
            raise CheckpointError(f"{path} is not a safetensors file (its {size} bytes hold no valid header); "
                                  "download or export it again.")
        raw = f.read(header_bytes)
    try:
        header = json.loads(raw)
        tensors = {name: TensorHeader(str(e["dtype"]), tuple(int(d) for d in e["shape"]), path)
                   for name, e in header.items() if name != "__metadata__"}
        data_end = max([int(e["data_offsets"][1]) for n, e in header.items() if n != "__metadata__"] + [0])
    except (ValueError, UnicodeDecodeError, TypeError, KeyError, IndexError, AttributeError) as e:
        raise CheckpointError(f"{path} has a malformed safetensors header ({type(e).__name__}: {e}); "
                              "download or export it again.") from None
    if 8 + header_bytes + data_end > size:
        raise CheckpointError(f"{path} is truncated: its header promises {8 + header_bytes + data_end} bytes, "
                              f"the file has {size} (an interrupted download?); download it again.")
    return tensors


def checkpoint_tensors(folder: str) -> tuple[dict[str, TensorHeader], str]:
    """(tensor name -> header over all weight files, the file that lists them) for a single-file
    or sharded checkpoint; a missing weights file or shard is a FileNotFoundError, a folder holding both
    layouts a CheckpointError (transformers would load one, vLLM the other)."""
    index, single = os.path.join(folder, INDEX), os.path.join(folder, SINGLE)
    if os.path.isfile(index) and os.path.isfile(single):
        raise CheckpointError(
            f"{folder!r} holds both {SINGLE} and {INDEX} (one is left over from an earlier save): transformers "
            f"loads {SINGLE}, vLLM the shards {INDEX} lists, so which weights are meant is unclear. Delete the "
            "stale one (or export again with ragen_jax's save_pretrained, which removes it).")
    if os.path.isfile(index):
        with open(index) as f:
            try:
                weight_map = json.load(f)["weight_map"]
            except (ValueError, KeyError, TypeError) as e:
                raise CheckpointError(f"{index} is not a valid index (needs a 'weight_map': {e}).") from None
        shards = sorted({os.path.join(folder, fname) for fname in weight_map.values()})
        for shard in shards:
            if not os.path.isfile(shard):
                raise MissingFileError(f"Shard {shard} listed in {INDEX} is missing.")
        tensors: dict[str, TensorHeader] = {}
        for shard in shards:
            tensors.update(read_header(shard))
        return tensors, index
    if not os.path.isfile(single):
        raise MissingFileError(
            f"No weights in {folder!r}: expected {SINGLE} or {INDEX} with its shards "
            "(PyTorch .bin checkpoints must be converted to safetensors first)."
        )
    return read_header(single), single


def stale_weight_files(existing: Iterable[str], written: Iterable[str]) -> list[str]:
    """The weight files among `existing` (names in a folder) that a save writing `written` leaves stale: the
    single file, the index and any shard it does not rewrite (a loader would otherwise read old weights)."""
    keep = set(written)
    return sorted(name for name in existing
                  if name not in keep and (name in (SINGLE, INDEX) or _SHARD.fullmatch(name)))


def check_tensors(expected: Mapping[str, ExpectedTensor], found: Mapping[str, TensorHeader], listing: str,
                  what: str) -> None:
    """Raises CheckpointError naming every needed tensor that is missing, mis-shaped or of an unloadable dtype.

    listing: the file that lists the tensors (for missing ones); what: the model, e.g. "qwen2 from config.json".
    """
    problems, mismatched = [], False
    for name, want in expected.items():
        have = found.get(name)
        if have is None:
            if not want.optional:
                problems.append(f"tensor {name!r} is missing from {listing}")
                mismatched = True
        elif have.shape != want.shape:
            problems.append(f"tensor {name!r} in {have.file} has shape {have.shape}, expected {want.shape}")
            mismatched = True
        elif have.dtype not in LOADABLE_DTYPES:
            problems.append(f"tensor {name!r} in {have.file} has dtype {have.dtype}; loadable dtypes: "
                            f"{', '.join(LOADABLE_DTYPES)} (dequantise the checkpoint first)")
    if not problems:
        return
    shown = problems[:_MAX_LISTED] + ([f"... and {len(problems) - _MAX_LISTED} more"]
                                      if len(problems) > _MAX_LISTED else [])
    hint = " (missing or mis-shaped tensors: config.json and the weights do not belong together)" if mismatched else ""
    raise CheckpointError(f"The checkpoint does not fit {what}{hint}; {len(problems)} problem(s):\n"
                          + "\n".join(f"  {p}" for p in shown))


def read_training_record(folder: str) -> dict:
    """The training record an export left in `folder` ({} when there is none or it cannot be read)."""
    path = os.path.join(folder, TRAINING_RECORD)
    try:
        with open(path) as f:
            record = json.load(f)
    except (OSError, ValueError):  # none, or not JSON: the weights' history is unknown
        return {}
    return record if isinstance(record, dict) else {}
