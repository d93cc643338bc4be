"""Shared pieces of the CUDA lowering tests: the small model every program is lowered at, and the lowering of
every program in ragen_jax.aot.programs.PROGRAMS on one device or a mesh, with what each lowering holds."""

from __future__ import annotations

import time

from ragen_jax.aot import gpu as G
from ragen_jax.aot import programs as P
from ragen_jax.models.tiny import tiny_config

MESH = (1, 4, 2)  # 8 devices: fsdp and tensor


def gpu_shaped_config():
    """Two bf16 layers whose attention cuDNN takes (head_dim 64; the last layer attends from selected positions,
    so a single layer would never reach the fused kernel); vocab and heads divide the 8-device mesh."""
    return tiny_config(param_dtype="bfloat16", vocab_size=1152, hidden_size=128, intermediate_size=256,
                       num_heads=2, num_kv_heads=2, head_dim=64, num_layers=2)


def sizes() -> P.Sizes:
    """Rows divide data*fsdp = 4."""
    return P.Sizes(micro_batch=4, mini_batch=8, seq_len=64, rollout_rows=8, slots=8, begin_rows=4, sft_rows=4)


def lower_all(mesh=None, names=None) -> dict[str, dict]:
    """{program: {seconds, cpu_seconds, custom_calls, partitions}} of each program lowered for CUDA
    (`gpu.lower_for_cuda`); cpu_seconds: this process's CPU time (what an idle machine's wall time would be)."""
    build = P.Build(gpu_shaped_config(), sizes(), mesh)
    out = {}
    for name in names or P.PROGRAMS:
        t0, c0 = time.perf_counter(), time.process_time()
        program = P.build(name, build)
        low = G.lower_for_cuda(program, mesh if name not in P.SINGLE_DEVICE else None)
        partitions = 1
        if "mhlo.num_partitions = " in low.text:
            partitions = int(low.text.split("mhlo.num_partitions = ")[1].split(" ")[0])
        out[name] = dict(seconds=time.perf_counter() - t0, cpu_seconds=time.process_time() - c0,
                         custom_calls=sorted(low.custom_calls), partitions=partitions)
    return out
