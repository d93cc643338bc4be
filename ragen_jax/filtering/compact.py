"""Gather kept trajectories into a smaller, bucketed batch so dropped groups cost no compute.

The kept count is padded up to a bucket size (a multiple of the PPO mini-batch and/or a power of
two, never above the unfiltered batch) with all-zero rows, so the loss mask of padding is zero
and the update compiles for only a handful of batch shapes.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np


def bucket_size(n: int, *, multiple: int = 1, pow2: bool = False, cap: int | None = None) -> int:
    """Smallest bucket >= n: rounded up to a power of two (optional), then to `multiple`.

    `cap` (the unfiltered row count) bounds the result; 0 rows stay 0 (the step is skipped).
    """
    if n < 0 or multiple < 1:
        raise ValueError(f"bucket_size needs n >= 0 and multiple >= 1, got n={n}, multiple={multiple}.")
    if n == 0:
        return 0
    size = 1 << (n - 1).bit_length() if pow2 else n
    size = -(-size // multiple) * multiple
    if cap is not None:
        if n > cap:
            raise ValueError(f"{n} kept rows exceed the batch of {cap} rows.")
        size = min(size, cap)
    return size


def _gather_pad(leaf: Any, index: np.ndarray, valid: np.ndarray) -> Any:
    """Rows `index` of leaf [B, ...] with rows where valid is False zeroed."""
    if isinstance(leaf, np.ndarray):
        taken = leaf[index]
        shape = (-1,) + (1,) * (taken.ndim - 1)
        return np.where(valid.reshape(shape), taken, np.zeros((), taken.dtype))
    taken = jnp.take(leaf, jnp.asarray(index), axis=0)
    shape = (-1,) + (1,) * (taken.ndim - 1)
    return jnp.where(jnp.asarray(valid).reshape(shape), taken, jnp.zeros((), taken.dtype))


def compact(
    batch: Any,
    kept_rows: np.ndarray,
    *,
    multiple: int = 1,
    pow2: bool = False,
) -> tuple[Any, np.ndarray]:
    """Batch pytree with leaves [B, ...] -> (leaves [bucket, ...], row_valid [bucket] bool).

    Rows `kept_rows` come first in the given order; the rest of the bucket is zero rows.
    Numpy leaves stay numpy, JAX leaves stay on device.
    """
    leaves = jax.tree_util.tree_leaves(batch)
    if not leaves:
        raise ValueError("compact needs a batch pytree with at least one array leaf.")
    rows = {int(np.shape(leaf)[0]) for leaf in leaves}
    if len(rows) != 1:
        raise ValueError(f"All batch leaves must share the leading (row) axis; got sizes {sorted(rows)}.")
    (total,) = rows
    kept_rows = np.asarray(kept_rows, dtype=np.int64).reshape(-1)
    if kept_rows.size and (kept_rows.min() < 0 or kept_rows.max() >= total):
        raise ValueError(f"kept_rows must lie in [0, {total}); got {kept_rows.min()}..{kept_rows.max()}.")
    size = bucket_size(kept_rows.size, multiple=multiple, pow2=pow2, cap=total)
    valid = np.arange(size) < kept_rows.size
    index = np.zeros(size, dtype=np.int64)
    index[: kept_rows.size] = kept_rows
    return jax.tree_util.tree_map(lambda leaf: _gather_pad(leaf, index, valid), batch), valid
