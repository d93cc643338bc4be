"""Lowers every program for CUDA on 8 forced CPU devices: `python tests/aot_lowering_worker.py OUT`.

Started by tests/test_aot_cuda_lowering.py in a subprocess with XLA_FLAGS set before jax is imported; writes
{program: {seconds, cpu_seconds, custom_calls, partitions}} as JSON, or {"error": ...} naming the program that failed."""

from __future__ import annotations

import json
import sys

import aot_testlib as L
from ragen_jax.aot.gpu import CpuOnlyProgramError
from ragen_jax.sharding import make_mesh

if __name__ == "__main__":
    try:
        result = L.lower_all(make_mesh(L.MESH))
    except CpuOnlyProgramError as e:
        result = {"error": str(e)}
    with open(sys.argv[1], "w") as f:
        json.dump(result, f)
