"""The mesh axis names models and `ragen_jax.sharding` share, and activation sharding hints.

Inside a model, `shard_activation(x, tensor_dim)` tells XLA that rows of an activation [B, ...] live on
the (data, fsdp) devices and, where given, dimension `tensor_dim` (heads, MLP features, vocab) on the
tensor devices. Each hint applies only under an active mesh with these axes (`jax.set_mesh`) and only
where the dimension divides; otherwise it is the identity, so one-device code pays nothing.
"""

from __future__ import annotations

import math

import jax
from jax.sharding import PartitionSpec as P

AXES = ("data", "fsdp", "tensor")
BATCH_AXES = ("data", "fsdp")
TENSOR_AXIS = "tensor"


def _active_mesh():
    mesh = jax.sharding.get_abstract_mesh()
    if mesh.empty or any(a not in mesh.axis_names for a in AXES):
        return None
    return mesh


def constrain(x: jax.Array, spec: P) -> jax.Array:
    """with_sharding_constraint under an active mesh that has every axis `spec` names; else x."""
    mesh = jax.sharding.get_abstract_mesh()
    if mesh.empty:
        return x
    axes = [a for entry in spec if entry is not None for a in ((entry,) if isinstance(entry, str) else entry)]
    if any(a not in mesh.axis_names for a in axes):
        return x
    return jax.lax.with_sharding_constraint(x, spec)


def shard_activation(x: jax.Array, tensor_dim: int | None = None, row_dim: int = 0) -> jax.Array:
    """x [B, ...]: rows (dim `row_dim`) over (data, fsdp) and dim `tensor_dim` over tensor, each where it divides."""
    mesh = _active_mesh()
    if mesh is None:
        return x
    spec: list = [None] * x.ndim
    if x.shape[row_dim] % math.prod(mesh.shape[a] for a in BATCH_AXES) == 0:
        spec[row_dim] = BATCH_AXES
    if tensor_dim is not None and x.shape[tensor_dim] % mesh.shape[TENSOR_AXIS] == 0:
        spec[tensor_dim] = TENSOR_AXIS
    if all(s is None for s in spec):
        return x
    return jax.lax.with_sharding_constraint(x, P(*spec))
