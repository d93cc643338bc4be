"""Decode lanes: a CPU sampler's rows split into equal parts that decode concurrently, one program call per lane.

On a CPU, a small model's decode step is many small ops (a few-row GEMM, a softmax over a short window), and
XLA:CPU's split of each op over the cores buys nothing there: such a step takes as long pinned to one core as on
two, while two program calls of half the rows each, made from two threads, run side by side
(`experiments/bench/bench_lanes.py` compares whole generate calls in lanes with one program; docs/performance.md,
"Decode"). A sampler in lanes keeps
one KV cache per lane (`LaneCaches`; its rows never move between lanes, so no step copies a cache), carries one
`TurnState` over the whole batch (small; split and merged per call) and runs each lane's begin and decode
programs on a shared thread pool. Each row's tokens depend only on its own key, prompt and cache, as without
lanes; the float sums of a GEMM over fewer rows may round differently in the last bit (as for any batch size).
"""

from __future__ import annotations

import concurrent.futures
import functools
import os
import threading
from typing import Any, Callable, Sequence

import flax
import jax
import jax.numpy as jnp
import numpy as np

from ragen_jax.models import KVCache, ModelConfig

# rows per lane: below it a lane's thread and its own program call cost more than the lane saves (bench_lanes.py)
MIN_LANE_ROWS = 8
MAX_LANE_WEIGHT_BYTES = 16 * 2**20  # weights one decode step reads (projections + output head); each lane reads all


@flax.struct.dataclass
class LaneCaches:
    """A sampler's KV cache held as one `KVCache` per lane: lane l has batch rows [l * R, (l + 1) * R), R =
    rows per lane. `k` and `v` read it as one cache (a concatenating copy: for inspection, not for decoding)."""

    lanes: tuple[KVCache, ...]

    @property
    def max_len(self) -> int:
        return self.lanes[0].max_len

    @property
    def batch_size(self) -> int:
        return sum(lane.batch_size for lane in self.lanes)

    @property
    def k(self) -> tuple[jax.Array, ...]:
        return tuple(jnp.concatenate(layer) for layer in zip(*(lane.k for lane in self.lanes)))

    @property
    def v(self) -> tuple[jax.Array, ...]:
        return tuple(jnp.concatenate(layer) for layer in zip(*(lane.v for lane in self.lanes)))


def decode_step_weight_bytes(config: ModelConfig) -> int:
    """Bytes of weights one decode step reads in the compute dtype: every decoder projection and the output head."""
    d, q, kv = config.hidden_size, config.num_heads * config.head_dim, config.num_kv_heads * config.head_dim
    per_layer = 2 * d * q + 2 * d * kv + 3 * d * config.intermediate_size
    return (config.num_layers * per_layer + d * config.vocab_size) * config.jnp_dtype.itemsize


def cpu_cores() -> int:
    """CPU cores this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def decode_lanes(config: ModelConfig, platform: str, batch_size: int, *, multi_device: bool = False,
                 cores: int | None = None) -> int:
    """How many lanes a sampler decodes in by default: on a CPU, for a model whose decode step reads at most
    MAX_LANE_WEIGHT_BYTES of weights, as many as there are cores and MIN_LANE_ROWS-row parts of the batch (a
    divisor of the batch); otherwise 1. A model past that bound gains nothing from lanes: each lane streams every
    weight from memory, so two lanes read them twice (`experiments/bench/bench_lanes.py` compares both model sizes)."""
    if platform != "cpu" or multi_device or decode_step_weight_bytes(config) > MAX_LANE_WEIGHT_BYTES:
        return 1
    lanes = max(1, min(cpu_cores() if cores is None else cores, batch_size // MIN_LANE_ROWS))
    while batch_size % lanes:
        lanes -= 1
    return lanes


@functools.partial(jax.jit, static_argnums=1)
def split_rows(tree: Any, lanes: int) -> tuple[Any, ...]:
    """A pytree of [B, ...] arrays -> `lanes` pytrees of [B / lanes, ...] consecutive rows."""
    return tuple(jax.tree.map(lambda x: x.reshape(lanes, -1, *x.shape[1:])[lane], tree) for lane in range(lanes))


@jax.jit
def merge_rows(trees: Sequence[Any]) -> Any:
    """Inverse of `split_rows`: the lanes' pytrees concatenated along rows."""
    return jax.tree.map(lambda *parts: jnp.concatenate(parts), *trees)


_POOL: concurrent.futures.ThreadPoolExecutor | None = None
_POOL_LOCK = threading.Lock()


def _pool() -> concurrent.futures.ThreadPoolExecutor:
    global _POOL
    with _POOL_LOCK:
        if _POOL is None:
            _POOL = concurrent.futures.ThreadPoolExecutor(max_workers=max(2, cpu_cores()),
                                                          thread_name_prefix="ragen-jax-lane")
        return _POOL


def run_lanes(calls: Sequence[Callable[[], Any]], *, first_alone: bool = False) -> list[Any]:
    """Runs the lanes' program calls side by side on a shared thread pool -> their results in order; the first
    error raised by any call is raised here (after every call has finished). `first_alone`: run calls[0] before
    the others start (its program compiles once instead of in every thread at the same time)."""
    results = []
    if first_alone and calls:
        results.append(jax.block_until_ready(calls[0]()))
        calls = calls[1:]
    if len(calls) == 1:
        return results + [jax.block_until_ready(calls[0]())]
    futures = [_pool().submit(lambda call=call: jax.block_until_ready(call())) for call in calls]
    concurrent.futures.wait(futures)
    return results + [future.result() for future in futures]


def lane_plan(rows: np.ndarray, source: np.ndarray, lane_rows: int) -> list[tuple[int, np.ndarray, np.ndarray]]:
    """Splits a begin over batch rows `rows` [R] (row i reusing the prefill of row source[i], an index into rows)
    by lane -> [(lane, picks, local_source)]: the positions `picks` of the lane's rows in `rows` and, for each,
    the index into picks of the row whose prefill it reuses. A row whose source lies in another lane takes the
    first row of its own lane with the same source instead (same new tokens and cache length, by the contract of
    `source`): prefills are shared within a lane, never across lanes."""
    plan = []
    lanes = rows // lane_rows
    for lane in np.unique(lanes):
        picks = np.flatnonzero(lanes == lane)
        first: dict[int, int] = {}
        local = np.array([first.setdefault(int(source[i]), j) for j, i in enumerate(picks)], np.int64)
        plan.append((int(lane), picks, local))
    return plan
