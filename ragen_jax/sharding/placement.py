"""Placing models, optimizer states and batches on the mesh: the hooks the trainer and sampler call.

Training layout: the partition rules as given (fsdp + tensor). Sampling layout ("no_fsdp"): the same
rules without fsdp, so decoding does not all-gather every weight for every token; resharding between
phases is one explicit `jax.device_put`.
"""

from __future__ import annotations

import dataclasses
import logging
from typing import Any, Mapping

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding

from ragen_jax.sharding.mesh import batch_shards
from ragen_jax.sharding.rules import (DEFAULT_RULES, Rules, batch_spec, fit_spec, put, shard_state, undivided_arrays,
                                      without_axis)

SAMPLING_LAYOUTS = ("training", "no_fsdp")
log = logging.getLogger(__name__)


def place_for_training(split_model: Any, mesh: Mesh, rules: Rules = DEFAULT_RULES) -> Any:
    """A copy of a SplitModel (graphdef, trainable, frozen) with both states placed by the rules; one warning
    names the arrays whose dims do not divide the mesh as the rules ask (those devices then hold copies)."""
    undivided = undivided_arrays((split_model.trainable, split_model.frozen), mesh, rules)
    if undivided:
        log.warning("sharding: %d parameter arrays cannot split as the partition rules ask on the mesh %s, because "
                    "their dims do not divide it; they stay whole along that dimension (those devices hold copies): "
                    "%s%s. A mesh whose fsdp and tensor sizes divide the heads, KV heads, vocabulary and hidden "
                    "sizes splits them all.", len(undivided), dict(mesh.shape), "; ".join(undivided[:3]),
                    "; ..." if len(undivided) > 3 else "")
    return dataclasses.replace(split_model, trainable=shard_state(split_model.trainable, mesh, rules),
                               frozen=shard_state(split_model.frozen, mesh, rules))


def sampling_rules(rules: Rules = DEFAULT_RULES, layout: str = "no_fsdp") -> tuple:
    """The rules the sampler's params use: `training` keeps them; `no_fsdp` replicates over fsdp."""
    if layout not in SAMPLING_LAYOUTS:
        raise ValueError(f"Unknown sampling layout {layout!r}; use one of {SAMPLING_LAYOUTS}.")
    return tuple(rules) if layout == "training" else without_axis(rules, "fsdp")


def reshard_for_sampling(params: Any, mesh: Mesh, rules: Rules = DEFAULT_RULES, layout: str = "no_fsdp") -> Any:
    """Params (e.g. `SplitModel.full()`) in the sampling layout; a no-op placement when nothing changes."""
    return shard_state(params, mesh, sampling_rules(rules, layout))


def _rows(arrays: Mapping[str, Any]) -> int:
    rows = {k: np.shape(v)[0] for k, v in arrays.items() if np.ndim(v) > 0}
    if len(set(rows.values())) > 1:
        raise ValueError(f"Batch arrays disagree on the number of rows: {rows}.")
    return next(iter(rows.values()), 0)


def shard_batch(arrays: Mapping[str, Any], mesh: Mesh) -> dict[str, jax.Array]:
    """Global batch arrays [B, ...] (the same on every host) -> rows split over (data, fsdp)."""
    rows, shards = _rows(arrays), batch_shards(mesh)
    if rows % shards:
        raise ValueError(
            f"A batch of {rows} rows cannot split over data*fsdp = {shards} devices; make the batch "
            f"(and mini/micro-batch sizes) a multiple of {shards}, or change the mesh.")
    return {k: put(v, NamedSharding(mesh, batch_spec(np.ndim(v)))) for k, v in arrays.items()}


def shard_local_batch(arrays: Mapping[str, Any], mesh: Mesh) -> dict[str, jax.Array]:
    """This host's rows (`process_rows(mesh, B)`, B / num_processes of them) -> one global batch [B, ...]
    with rows over (data, fsdp)."""
    rows, shards = _rows(arrays), batch_shards(mesh)
    if (rows * jax.process_count()) % shards:
        raise ValueError(f"{jax.process_count()} hosts x {rows} local rows cannot split over data*fsdp = "
                         f"{shards} devices; make the per-host batch a multiple of "
                         f"{shards // jax.process_count() or 1}.")
    return {k: rows_to_global(v, mesh, rows * jax.process_count()) for k, v in arrays.items()}


# ---------------------------------------------------------------------------- process-local rows
def row_sharding(mesh: Mesh, shape: tuple[int, ...]) -> NamedSharding:
    """Rows of an array of `shape` over (data, fsdp) where they divide; other dimensions replicated."""
    return NamedSharding(mesh, fit_spec(batch_spec(len(shape)), shape, mesh))


def process_rows(mesh: Mesh | None, rows: int) -> slice:
    """The rows of a global [rows, ...] batch whose shards live on this process's devices.

    One process (or no mesh): every row. A process owns one contiguous block; processes whose devices
    differ only along `tensor` share a block (each then plays the same rows).
    """
    if mesh is None:
        if jax.process_count() > 1:
            raise ValueError("With several processes, pass the mesh: each process owns the rows its devices hold.")
        return slice(0, rows)
    held = np.zeros(rows, bool)
    for index in row_sharding(mesh, (rows,)).addressable_devices_indices_map((rows,)).values():
        held[index[0]] = True
    where = np.flatnonzero(held)
    if where.size == 0 or where[-1] - where[0] + 1 != where.size:
        raise ValueError(
            f"This process's devices hold rows {where.tolist()} of a {rows}-row batch, not one contiguous block. "
            "Build the mesh over jax.devices() in their default (host-major) order, with data*fsdp a multiple "
            "of the number of processes.")
    return slice(int(where[0]), int(where[-1]) + 1)


def rows_to_global(local: Any, mesh: Mesh, rows: int) -> jax.Array:
    """This process's block [n, ...] of a global [rows, ...] array (see `process_rows`) -> the global array."""
    local = np.asarray(local)
    shape = (rows, *local.shape[1:])
    return jax.make_array_from_process_local_data(row_sharding(mesh, shape), local, shape)


def global_to_local_rows(x: jax.Array, rows: slice) -> np.ndarray:
    """The rows `rows` of a global array [B, ...] as numpy, read from this process's shards only."""
    if x.is_fully_addressable:
        return np.asarray(x)[rows].copy()
    out = np.zeros((rows.stop - rows.start, *x.shape[1:]), x.dtype)
    filled = np.zeros(out.shape, bool)
    for shard in x.addressable_shards:
        lo, hi, _ = shard.index[0].indices(x.shape[0])
        a, b = max(lo, rows.start), min(hi, rows.stop)
        if a >= b:
            continue
        target = (slice(a - rows.start, b - rows.start), *shard.index[1:])
        out[target] = np.asarray(shard.data)[a - lo:b - lo]
        filled[target] = True
    if not filled.all():
        raise ValueError(f"This process's shards of an array {x.shape} with sharding {x.sharding} do not hold all "
                         f"of rows {rows.start}:{rows.stop}; lay it out by rows (`row_sharding`).")
    return out
