"""Scale-out: the (data, fsdp, tensor) device mesh, partition rules, placement hooks, multi-host start,
and the per-device memory planner."""

from ragen_jax.models.partitioning import constrain, shard_activation
from ragen_jax.sharding.mesh import (AXES, BATCH_AXES, batch_shards, check_batch_sizes, make_mesh, padded_batch_size,
                                     resolve_mesh_shape, validation_batch_size)
from ragen_jax.sharding.placement import (SAMPLING_LAYOUTS, global_to_local_rows,
                                          place_for_training, process_rows, reshard_for_sampling, row_sharding,
                                          rows_to_global, sampling_rules, shard_batch, shard_local_batch)
from ragen_jax.sharding.rules import (DEFAULT_RULES, cache_spec, fit_spec, shard_cache, shard_state, spec_for,
                                      state_shardings, state_specs, without_axis)

constrain_rows = shard_activation  # the rows-only hint: shard_activation(x) without a tensor dimension

__all__ = [
    "AXES", "BATCH_AXES", "batch_shards", "check_batch_sizes", "make_mesh", "padded_batch_size", "resolve_mesh_shape",
    "validation_batch_size", "SAMPLING_LAYOUTS",
    "constrain", "constrain_rows", "shard_activation", "global_to_local_rows", "place_for_training", "process_rows",
    "row_sharding", "rows_to_global", "reshard_for_sampling", "sampling_rules",
    "shard_batch", "shard_local_batch", "DEFAULT_RULES", "cache_spec", "fit_spec", "shard_cache", "shard_state",
    "spec_for", "state_shardings", "state_specs", "without_axis",
]
from ragen_jax.sharding.distributed import (agree_any, agree_max, allgather_objects, barrier, broadcast_from_main,
                                            gather_to_host, is_main_process, maybe_initialize_distributed, on_main,
                                            settle)
from ragen_jax.sharding.memory import MemoryPlan, MemoryPlanError, estimate_memory
from ragen_jax.sharding.planning import check_plan, device_memory_bytes, plan_from_config

__all__ += [
    "agree_any", "agree_max", "allgather_objects", "barrier", "broadcast_from_main", "gather_to_host",
    "is_main_process", "maybe_initialize_distributed", "on_main", "settle",
    "MemoryPlan", "MemoryPlanError", "check_plan", "device_memory_bytes", "estimate_memory", "plan_from_config",
]
