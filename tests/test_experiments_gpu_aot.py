"""experiments/bench/gpu_aot.py's arithmetic: the paper lower bounds follow from a compiled program's bytes and FLOPs,
and a GPU session's measured figures are printed beside them (the compiles themselves: tests/test_aot_gpu_compile.py,
slow, with the CUDA plugin)."""

from __future__ import annotations

import os
import sys

import jax
import jax.numpy as jnp
import pytest

from ragen_jax.aot import gpu as G
from ragen_jax.aot.programs import Program

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "experiments", "bench"))


def _decode_program(rows: int) -> Program:
    state = type("State", (), {"lengths": jax.ShapeDtypeStruct((rows,), jnp.int32)})()
    return Program("lockstep/decode", None, (None, None, None, state, None), kind="decode", tokens=rows * 8)


@pytest.mark.parametrize("gpu, bandwidth", [("h100", 3.35e12), ("h200", 4.8e12)])
def test_decode_and_update_bounds_follow_from_bytes_and_flops(gpu, bandwidth):
    stats = G.CompiledStats(argument=int(bandwidth / 1000), output=0, alias=0, temp=7, flops=989e9,
                            bytes_accessed=0.0)
    decode = G.roofline(stats, _decode_program(32), gpu)
    assert decode["step_bound_s"] == pytest.approx(1e-3)  # one step reads the arguments once: 1 ms
    assert decode["tokens_per_s_bound"] == pytest.approx(32_000)  # 32 rows a step
    update = G.roofline(stats, Program("update/actor", None, (), kind="update"), gpu)
    assert update == {"flops_bound_s": pytest.approx(1e-3)}  # 989 GFLOP at 989 TFLOP/s


def test_measured_figures_are_printed_beside_the_bounds(tmp_path):
    from gpu_aot import beside_measured, read_measured

    out = tmp_path / "bench_gpu.txt"
    out.write_text('device: NVIDIA H100 80GB HBM3 x1\n0.5b {"decode_tokens_per_s": 16000.0, "train_step_s": 0.5}\n'
                   "total 12.0s\n")
    measured = read_measured(str(out))
    assert measured == {"0.5b": {"decode_tokens_per_s": 16000.0, "train_step_s": 0.5}}
    rows = [dict(model="0.5b", gpu="h100", program="lockstep/decode", tokens_per_s_bound=32000.0),
            dict(model="0.5b", gpu="h100", program="update/actor", flops_bound_s=0.2)]
    line = beside_measured(rows, measured).splitlines()[-1]
    assert line == "| 0.5b | h100 | 16,000 | 32,000 | 50.0% | 0.500 | 0.200 | 40.0% |"
