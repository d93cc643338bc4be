"""One process of the 2-process checkpoint test: `python tests/multihost_checkpoint_worker.py DIR`.

Both processes save a sharded state as checkpoint 0, whose write fails on process 1 only (a full disk, injected
into its Orbax handler), then as checkpoint 1 (no failure), then restore 1. Each writes DIR/process_{i}.json:
what each save raised, how long save 0 took, the finished steps and whether the restore matched.
"""

from __future__ import annotations

import errno
import json
import os
import sys
import time

import jax
import numpy as np
import orbax.checkpoint as ocp
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

from ragen_jax.checkpoint import Checkpointer, finished_steps
from ragen_jax.sharding.distributed import barrier, maybe_initialize_distributed

BARRIER_TIMEOUT_S = 5


def fail_on_process_1(step_to_fail: int):
    """Make process 1's Orbax state handler raise ENOSPC when it writes `step_to_fail` (the others write)."""
    write = ocp.StandardCheckpointHandler.async_save

    async def async_save(self, directory, *args, **kwargs):
        if jax.process_index() == 1 and f"{os.sep}{step_to_fail}.orbax-checkpoint-tmp" in str(directory):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(directory))
        return await write(self, directory, *args, **kwargs)

    ocp.StandardCheckpointHandler.async_save = async_save


def try_save(ckpt: Checkpointer, step: int, state: dict) -> str | None:
    try:
        ckpt.save(step, state, {"step": step})
        return None
    except Exception as e:  # noqa: BLE001 - the test compares what every process raised
        return f"{type(e).__name__}: {e}"


if __name__ == "__main__":
    out = sys.argv[1]
    assert maybe_initialize_distributed(None) and jax.process_count() == 2
    mesh = Mesh(np.array(jax.devices()), ("d",))
    values = np.arange(16, dtype=np.float32).reshape(8, 2)
    state = {"w": jax.make_array_from_callback(values.shape, NamedSharding(mesh, P("d")), lambda i: values[i])}
    fail_on_process_1(step_to_fail=0)
    ckpt = Checkpointer(os.path.join(out, "checkpoints"), barrier_timeout_s=BARRIER_TIMEOUT_S)
    t0 = time.monotonic()
    first = try_save(ckpt, 0, state)
    first_s = time.monotonic() - t0
    second = try_save(ckpt, 1, state)
    abstract = jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=x.sharding), state)
    restored, meta = ckpt.restore(1, abstract)
    matches = bool(np.array_equal(jax.experimental.multihost_utils.process_allgather(restored["w"], tiled=True),
                                  values)) and meta == {"step": 1}
    barrier("checkpoint test done")
    result = {"first": first, "first_s": first_s, "second": second, "restored_matches": matches,
              "steps": finished_steps(ckpt.directory), "entries": sorted(os.listdir(ckpt.directory))}
    with open(os.path.join(out, f"process_{jax.process_index()}.json"), "w") as f:
        json.dump(result, f)
    ckpt.close()
    jax.distributed.shutdown()
