"""Multi-host start and process-0-only helpers.

Every host runs the same program; `maybe_initialize_distributed(cfg)` joins them into one JAX runtime
(`jax.distributed.initialize`) before anything touches a device. Settings come from the config's
`distributed` block, overridden by environment variables (so a launcher can set them per host):
JAX_COORDINATOR_ADDRESS (host:port of process 0), JAX_NUM_PROCESSES, JAX_PROCESS_ID, JAX_LOCAL_DEVICE_IDS
(comma-separated). `distributed.auto=True` lets JAX detect SLURM / Open MPI / Kubernetes clusters itself.
"""

from __future__ import annotations

import functools
import logging
import os
import pickle
from typing import Any, Callable, Mapping, TypeVar

import jax
import numpy as np
from jax.experimental import multihost_utils

log = logging.getLogger(__name__)
T = TypeVar("T")

ENV_VARS = {"coordinator_address": "JAX_COORDINATOR_ADDRESS", "num_processes": "JAX_NUM_PROCESSES",
            "process_id": "JAX_PROCESS_ID", "local_device_ids": "JAX_LOCAL_DEVICE_IDS"}


def _section(cfg: Any) -> Mapping[str, Any]:
    if cfg is None:
        return {}
    section = cfg.get("distributed", None) if hasattr(cfg, "get") else getattr(cfg, "distributed", None)
    return dict(section or {})


def distributed_settings(cfg: Any = None, environ: Mapping[str, str] | None = None) -> dict[str, Any]:
    """The effective settings: config `distributed` block, then environment variables on top."""
    environ = os.environ if environ is None else environ
    s: dict[str, Any] = {"coordinator_address": "", "num_processes": 1, "process_id": 0, "local_device_ids": None,
                         "auto": False, "initialization_timeout": 300}
    s.update({k: v for k, v in _section(cfg).items() if v not in (None, "")})
    for key, var in ENV_VARS.items():
        if environ.get(var):
            s[key] = environ[var]
    s["num_processes"], s["process_id"] = int(s["num_processes"]), int(s["process_id"])
    ids = s["local_device_ids"]
    if isinstance(ids, str):
        s["local_device_ids"] = [int(i) for i in ids.split(",") if i.strip()]
    if s["num_processes"] > 1 and not s["coordinator_address"] and not s["auto"]:
        raise ValueError(
            f"num_processes={s['num_processes']} needs a coordinator: set distributed.coordinator_address "
            "(or JAX_COORDINATOR_ADDRESS) to host:port of process 0, or distributed.auto=True on SLURM/MPI.")
    if not 0 <= s["process_id"] < max(s["num_processes"], 1):
        raise ValueError(f"process_id {s['process_id']} must lie in [0, num_processes={s['num_processes']}).")
    return s


def maybe_initialize_distributed(cfg: Any = None) -> bool:
    """Joins the multi-host runtime when configured (idempotent); returns whether JAX runs distributed."""
    if jax.distributed.is_initialized():
        return True
    s = distributed_settings(cfg)
    if s["auto"]:
        jax.distributed.initialize(initialization_timeout=int(s["initialization_timeout"]))
    elif s["num_processes"] > 1:
        jax.distributed.initialize(coordinator_address=s["coordinator_address"], num_processes=s["num_processes"],
                                   process_id=s["process_id"], local_device_ids=s["local_device_ids"],
                                   initialization_timeout=int(s["initialization_timeout"]))
    else:
        return False
    log.info("jax.distributed: process %d of %d, %d local / %d global devices", jax.process_index(),
             jax.process_count(), jax.local_device_count(), jax.device_count())
    return True


def is_main_process() -> bool:
    """Whether this is process 0 (the one that writes logs, checkpoints metadata and exports)."""
    return jax.process_index() == 0


def on_main(fn: Callable[..., T]) -> Callable[..., T | None]:
    """Decorator: run `fn` on process 0 only (other processes get None)."""
    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> T | None:
        return fn(*args, **kwargs) if is_main_process() else None
    return wrapper


def barrier(name: str) -> None:
    """Wait until every process reaches the barrier `name` (a no-op with one process)."""
    if jax.process_count() > 1:
        multihost_utils.sync_global_devices(name)


def broadcast_from_main(tree: Any) -> Any:
    """Process 0's value of a pytree of arrays on every process (e.g. a seed or a decision)."""
    if jax.process_count() == 1:
        return tree
    return multihost_utils.broadcast_one_to_all(tree)


def gather_to_host(tree: Any) -> Any:
    """Every (possibly multi-host) array of a pytree as a full numpy array on every process."""
    def fetch(x: Any) -> Any:
        if isinstance(x, jax.Array) and not x.is_fully_addressable:
            return np.asarray(multihost_utils.process_allgather(x, tiled=True))
        return np.asarray(x)
    return jax.tree.map(fetch, tree)


def allgather_objects(obj: Any) -> list[Any]:
    """Every process's picklable `obj`, in process order, on every process ([obj] with one process).

    For small host-side results (a host's played episodes, its timing): two collectives, the byte
    counts and then the zero-padded pickles.
    """
    if jax.process_count() == 1:
        return [obj]
    blob = np.frombuffer(pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL), np.uint8)
    sizes = np.asarray(multihost_utils.process_allgather(np.int32(blob.size))).reshape(-1)
    padded = np.zeros(int(sizes.max()), np.uint8)
    padded[: blob.size] = blob
    blobs = np.asarray(multihost_utils.process_allgather(padded)).reshape(len(sizes), -1)
    return [pickle.loads(blobs[i, : sizes[i]].tobytes()) for i in range(len(sizes))]


def agree_max(*values: int) -> tuple[int, ...]:
    """The largest of every process's value, per argument, in one collective (e.g. padded widths all hosts
    must compile alike)."""
    local = np.asarray(values, np.int32)
    if jax.process_count() == 1:
        return tuple(int(v) for v in local)
    return tuple(int(v) for v in np.max(multihost_utils.process_allgather(local), axis=0))


def agree_any(flag: bool) -> bool:
    """Whether any process's `flag` is set (e.g. "an episode is still running somewhere")."""
    return agree_max(int(bool(flag)))[0] > 0


def settle(tree: T) -> T:
    """`tree` once computed, when several processes share CPU devices; else `tree` at once.

    With jax.distributed on CPU (gloo collectives) the 2-process trainer test sometimes hung inside the
    update loop with many multi-device programs in flight; waiting for each update keeps one program with
    collectives in flight at a time. GPUs and one process are unaffected.
    """
    if jax.process_count() > 1 and jax.default_backend() == "cpu":
        jax.block_until_ready(tree)
    return tree
