"""The device mesh: three named axes (data, fsdp, tensor) built from config sizes, -1 meaning "the rest"."""

from __future__ import annotations

import math
from typing import Any, Mapping, Sequence

import jax
import numpy as np
from jax.sharding import AxisType, Mesh

from ragen_jax.models.partitioning import AXES, BATCH_AXES  # noqa: F401  (the axis names models annotate with)


#: Keys of the config's `mesh` section that are settings, not axes (so `make_mesh(cfg.mesh)` takes the section).
MESH_SETTINGS = ("sampling_layout", "rollout_devices")


def _sizes(cfg_mesh: Mapping[str, Any] | Sequence[int]) -> list[int]:
    if isinstance(cfg_mesh, Mapping) or hasattr(cfg_mesh, "keys"):
        unknown = set(cfg_mesh.keys()) - set(AXES) - set(MESH_SETTINGS)
        if unknown:
            raise ValueError(f"Unknown mesh axes {sorted(unknown)}; the mesh has axes {AXES}.")
        return [int(cfg_mesh.get(a, 1)) for a in AXES]
    sizes = [int(s) for s in cfg_mesh]
    if len(sizes) != len(AXES):
        raise ValueError(f"A mesh shape needs {len(AXES)} sizes {AXES}, got {sizes}.")
    return sizes


def resolve_mesh_shape(cfg_mesh: Mapping[str, Any] | Sequence[int], num_devices: int) -> tuple[int, int, int]:
    """(data, fsdp, tensor) sizes whose product is num_devices; at most one size may be -1 (the rest)."""
    sizes = _sizes(cfg_mesh)
    if any(s == 0 or s < -1 for s in sizes):
        raise ValueError(f"Mesh sizes must be positive or -1 (the rest), got {dict(zip(AXES, sizes))}.")
    free = [i for i, s in enumerate(sizes) if s == -1]
    if len(free) > 1:
        raise ValueError(f"At most one mesh axis may be -1, got {dict(zip(AXES, sizes))}.")
    fixed = math.prod(s for s in sizes if s != -1)
    if free:
        if num_devices % fixed:
            raise ValueError(
                f"Cannot fill the mesh: {num_devices} devices are not a multiple of the fixed axes' product "
                f"{fixed} ({dict(zip(AXES, sizes))}). Change mesh sizes so they divide the device count."
            )
        sizes[free[0]] = num_devices // fixed
    elif fixed != num_devices:
        raise ValueError(
            f"Mesh {dict(zip(AXES, sizes))} needs {fixed} devices but {num_devices} are available; "
            f"set one axis to -1 to use the rest, or change the sizes."
        )
    return tuple(sizes)  # type: ignore[return-value]


def make_mesh(cfg_mesh: Mapping[str, Any] | Sequence[int] | None = None,
              devices: Sequence[jax.Device] | None = None) -> Mesh:
    """A Mesh with axes (data, fsdp, tensor) over `devices` (default: all, across hosts).

    Axes are `Auto`, so jit propagates shardings from the placed params and batches (GSPMD).
    """
    devices = list(devices) if devices is not None else jax.devices()
    shape = resolve_mesh_shape(cfg_mesh if cfg_mesh is not None else {"data": -1}, len(devices))
    if devices == jax.devices():
        return jax.make_mesh(shape, AXES, axis_types=(AxisType.Auto,) * len(AXES))
    return Mesh(np.asarray(devices, dtype=object).reshape(shape), AXES, axis_types=(AxisType.Auto,) * len(AXES))


def mesh_shape(mesh: Mesh) -> dict[str, int]:
    """{axis: size} of a mesh."""
    return dict(mesh.shape)


def batch_shards(mesh: Mesh) -> int:
    """How many ways a batch's rows are split: data * fsdp."""
    return math.prod(mesh.shape[a] for a in BATCH_AXES)


def check_batch_sizes(sizes: Mapping[str, int], shape: Mapping[str, int]) -> None:
    """Raise one ValueError naming every config key whose rows (`sizes`: key -> rows) do not split over the
    data * fsdp devices of a mesh of `shape` ({axis: size}). Run it before anything is built: the training
    batch is only placed after a whole rollout."""
    shards = math.prod(shape[a] for a in BATCH_AXES)
    bad = [f"{key} = {rows}" for key, rows in sizes.items() if rows % shards]
    if bad:
        raise ValueError(
            f"Batch rows split over data*fsdp = {shards} devices (mesh {dict(shape)}), but {', '.join(bad)} "
            f"{'is' if len(bad) == 1 else 'are'} not a multiple of {shards}: make "
            f"{'it' if len(bad) == 1 else 'them'} a multiple of {shards}, or lower mesh.data / mesh.fsdp "
            "(raising mesh.tensor instead).")


def validation_batch_size(val: Any, shape: Mapping[str, int]) -> int:
    """Episodes a validation chunk plays (config.val: batch_size, groups, group_size), padded to split over the
    mesh (`padded_batch_size`)."""
    return padded_batch_size(min(val.batch_size, val.groups * val.group_size), val.group_size, shape)


def padded_batch_size(rows: int, group_size: int, shape: Mapping[str, int]) -> int:
    """The smallest batch >= `rows` of whole groups of `group_size` that splits over the data * fsdp devices of a
    mesh of `shape`. A batch that does not split is replicated: every device decodes every row and holds the
    whole KV cache; the few extra episodes of a padded batch cost less than that."""
    step = math.lcm(group_size, math.prod(shape[a] for a in BATCH_AXES))
    return -(-rows // step) * step
