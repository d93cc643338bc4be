"""One process of the 2-process jax.distributed test: `python tests/multihost_worker.py OUT`.

Settings come from JAX_COORDINATOR_ADDRESS / JAX_NUM_PROCESSES / JAX_PROCESS_ID and XLA_FLAGS (2 CPU
devices per process). Runs a sharded train step on a (1, 2, 2) mesh over the 4 global devices; process 0
saves the gathered result.
"""

from __future__ import annotations

import sys

import jax
import numpy as np

from ragen_jax.sharding import make_mesh, process_rows, shard_batch, shard_local_batch
from ragen_jax.sharding.distributed import barrier, gather_to_host, is_main_process, maybe_initialize_distributed

if __name__ == "__main__":
    assert maybe_initialize_distributed(None)
    assert jax.process_count() == 2 and jax.device_count() == 4 and jax.local_device_count() == 2
    import sharding_testlib as L

    result = L.train_step((1, 2, 2))
    mesh = make_mesh((2, 2, 1))
    full = L.synthetic_batch()
    mine = {k: v[process_rows(mesh, L.ROWS)] for k, v in full.items()}
    from_local = gather_to_host(shard_local_batch(mine, mesh))
    from_global = gather_to_host(shard_batch(full, mesh))
    result["check/local_batch_equal"] = np.array(all(np.array_equal(from_local[k], full[k]) for k in full))
    result["check/global_batch_equal"] = np.array(all(np.array_equal(from_global[k], full[k]) for k in full))
    result["check/process_count"] = np.array(jax.process_count())
    barrier("done")
    if is_main_process():
        np.savez(sys.argv[1], **result)
    jax.distributed.shutdown()
