"""Step a batch of host envs from inside jitted code through `jax.experimental.io_callback`.

Text cannot cross into XLA, so it travels through a host-side buffer: jitted code passes and
receives int32 *handles*; `put_actions(texts)` stores action texts under a handle before the
call and `observations(handle)` reads the returned texts after it. Numeric results (rewards,
done flags, success, error flags) come back as fixed-shape arrays [B], so the jitted program
never changes shape. Env failures are handled by the wrapped `HostEnvBatch` (episode ends,
error recorded), so a callback never raises because of one env.
"""

from __future__ import annotations

import itertools
import threading
from typing import Any, Sequence

import jax
import jax.numpy as jnp
import numpy as np
from jax.experimental import io_callback

from envs.host_batch import HostEnvBatch
from envs.protocols import TurnResult


class HostEnvBridge:
    """Jittable `reset` / `step` over a `HostEnvBatch`, with texts kept in a host buffer by handle."""

    def __init__(self, batch: HostEnvBatch):
        self.batch = batch
        self._buffer: dict[int, Any] = {}
        self._next = itertools.count(1)
        self._lock = threading.Lock()
        self.last_result: TurnResult | None = None

    @property
    def batch_size(self) -> int:
        return self.batch.batch_size

    # ---- host buffer --------------------------------------------------------------------------
    def _store(self, value: Any) -> np.int32:
        with self._lock:
            handle = next(self._next)
            self._buffer[handle] = value
        return np.int32(handle)

    def _take(self, handle: int) -> Any:
        with self._lock:
            if int(handle) not in self._buffer:
                raise KeyError(f"Unknown or already consumed bridge handle {int(handle)}.")
            return self._buffer.pop(int(handle))

    def put_actions(self, actions: Sequence[Sequence[str | int]]) -> np.int32:
        """Store B lists of actions (texts or ids) for the next `step`; returns the handle to pass in."""
        if len(actions) != self.batch_size:
            raise ValueError(f"Expected {self.batch_size} action lists, got {len(actions)}.")
        return self._store([list(a) for a in actions])

    def observations(self, handle: jax.Array | int) -> list[str]:
        """The B observation texts stored under `handle` (consumed on read)."""
        return self._take(int(handle))

    # ---- host callbacks -----------------------------------------------------------------------
    def _host_reset(self, seeds: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        texts = self.batch.reset([int(s) for s in np.asarray(seeds)])
        failed = np.array([bool(e) for e in self.batch.reset_errors])
        return self._store(texts), failed

    def _host_step(self, handle: np.ndarray, active: np.ndarray) -> tuple[np.ndarray, ...]:
        result = self.batch.step(self._take(int(handle)), np.asarray(active, bool))
        self.last_result = result
        return (self._store(result.observations), result.rewards.astype(np.float32), result.terminated,
                result.truncated, result.success, np.array([bool(e) for e in result.errors]))

    # ---- jittable entry points ----------------------------------------------------------------
    def reset(self, seeds: jax.Array) -> tuple[jax.Array, jax.Array]:
        """seeds [B] int32 -> (observation handle [] int32, reset_failed [B] bool). Jittable."""
        b = self.batch_size
        shapes = (jax.ShapeDtypeStruct((), jnp.int32), jax.ShapeDtypeStruct((b,), jnp.bool_))
        return io_callback(self._host_reset, shapes, seeds, ordered=True)

    def step(self, action_handle: jax.Array, active: jax.Array) -> dict[str, jax.Array]:
        """One turn. action_handle [] int32 from `put_actions`; active [B] bool. Jittable.

        Returns obs_handle [] int32, rewards [B] float32, terminated / truncated / success /
        error [B] bool.
        """
        b = self.batch_size
        shapes = (jax.ShapeDtypeStruct((), jnp.int32), jax.ShapeDtypeStruct((b,), jnp.float32),
                  *(jax.ShapeDtypeStruct((b,), jnp.bool_) for _ in range(4)))
        out = io_callback(self._host_step, shapes, action_handle, active, ordered=True)
        return dict(zip(("obs_handle", "rewards", "terminated", "truncated", "success", "error"), out))
