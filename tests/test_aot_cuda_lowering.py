"""Every program a run compiles lowers for CUDA with the CPU jaxlib, traced as a GPU run traces it (cuDNN attention
for training and scoring, dense decode windows, no CPU-only decode lanes or weights), on one device and sharded
over an 8-device mesh; a program that only lowers for the CPU fails with its name."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.experimental import io_callback
from jax.extend.core import Primitive
from jax.interpreters import mlir

import aot_testlib as L
from ragen_jax.aot import gpu as G
from ragen_jax.aot import programs as P
from ragen_jax.models import target
from ragen_jax.models.attention import _device_facts, choose_implementation
from ragen_jax.models.decode_attention import uses_ragged_decode

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
FUSED = "__cudnn$fmhaSoftmax"
PARTITIONED = "CustomSPMDPartitioning"
# programs whose attention runs over a whole row without a cache: cuDNN's fused kernel on a GPU
CUDNN_FORWARD = {"score/policy", "score/values"}
CUDNN_BACKWARD = {"update/actor", "update/actor_lora", "update/critic", "update/critic_lora"}


def _lower_on_8_devices(tmp_path) -> dict:
    """The lowering of every program on 8 forced CPU devices (XLA_FLAGS must be set before jax starts)."""
    out = str(tmp_path / "mesh.json")
    env = dict(os.environ, XLA_FLAGS="--xla_force_host_platform_device_count=8", JAX_PLATFORMS="cpu",
               PYTHONPATH=os.pathsep.join([ROOT, HERE, os.environ.get("PYTHONPATH", "")]))
    proc = subprocess.run([sys.executable, os.path.join(HERE, "aot_lowering_worker.py"), out], env=env,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-4000:]
    with open(out) as f:
        return json.load(f)


def _check_attention(name: str, calls: list[str], sharded: bool = False) -> None:
    """Rows without a cache use cuDNN's fused kernel (forward and, in an update, backward); under a mesh jax
    wraps it in its custom partitioning (the fused call appears once the partitioner runs at compile time)."""
    fused = {c for c in calls if c.startswith(FUSED) or c == PARTITIONED}
    if sharded:
        assert fused == ({PARTITIONED} if name in CUDNN_FORWARD | CUDNN_BACKWARD else set()), (name, calls)
    elif name in CUDNN_BACKWARD:
        assert fused == {FUSED, FUSED + "Backward"}, (name, calls)
    elif name in CUDNN_FORWARD:
        assert fused == {FUSED}, (name, calls)
    else:  # decoding and prefilling from a cache: XLA's own attention
        assert not fused, (name, calls)


@pytest.mark.slow  # default run: too long for CI's 15 minutes on 2 cores
def test_every_program_lowers_for_cuda_on_one_device():
    result = L.lower_all()
    assert set(result) == set(P.PROGRAMS)
    for name, low in result.items():
        _check_attention(name, low["custom_calls"])
        assert low["partitions"] == 1, name


@pytest.mark.slow  # default run: too long for CI's 15 minutes on 2 cores
def test_every_program_lowers_for_cuda_sharded_over_8_devices(tmp_path):
    result = _lower_on_8_devices(tmp_path)
    assert "error" not in result, result.get("error")
    assert set(result) == set(P.PROGRAMS)
    for name, low in result.items():
        _check_attention(name, low["custom_calls"], sharded=name not in P.SINGLE_DEVICE)
        assert low["partitions"] == (1 if name in P.SINGLE_DEVICE else 8), (name, low["partitions"])


def test_a_gpu_run_chooses_cudnn_dense_decode_and_no_cpu_lanes():
    """What `target.compiling_for` makes the code choose is what it chooses on an H100."""
    with target.compiling_for("gpu", "9.0"):
        assert _device_facts() == ("gpu", "9.0")
        assert not uses_ragged_decode(1)
        sampler = P.Build(L.gpu_shaped_config(), L.sizes()).sampler(8)
        assert (sampler.out_first_weights, sampler.lanes) == (False, 1)
    assert choose_implementation(platform="gpu", dtype=jnp.bfloat16, head_dim=64, q_len=64, from_cache=False,
                                 compute_capability="9.0") == "cudnn"
    assert _device_facts()[0] == jax.devices()[0].platform  # restored


def _cpu_only_primitive():
    prim = Primitive("cpu_only_double")
    prim.def_impl(lambda x: 2 * x)
    prim.def_abstract_eval(lambda x: x)
    mlir.register_lowering(prim, mlir.lower_fun(lambda x: 2 * x, multiple_results=False), platform="cpu")
    return prim


@pytest.mark.parametrize("make", ["primitive", "io_callback", "pure_callback"])
def test_a_program_that_lowers_only_for_the_cpu_fails_with_its_name(make):
    x = jax.ShapeDtypeStruct((4,), jnp.float32)
    fn = {"primitive": lambda a: _cpu_only_primitive().bind(a),
          "io_callback": lambda a: io_callback(lambda v: np.asarray(v), x, a),
          "pure_callback": lambda a: jax.pure_callback(lambda v: np.asarray(v), x, a)}[make]
    assert jax.jit(fn)(jnp.ones(4)).shape == (4,)  # fine on the CPU
    with pytest.raises(G.CpuOnlyProgramError, match=rf"^my/{make}: "):
        G.lower_for_cuda(P.Program(f"my/{make}", jax.jit(fn), (x,)))


def test_cpu_only_calls_finds_host_callbacks_and_cpu_kernels():
    text = ('%0 = stablehlo.custom_call @xla_ffi_python_gpu_callback(%a)\n'
            '%1 = stablehlo.custom_call @lapack_sgetrf_ffi(%b)\n%2 = stablehlo.custom_call @__cudnn$fmhaSoftmax(%c)')
    assert G.cpu_only_calls(text) == ["lapack_sgetrf_ffi", "xla_ffi_python_gpu_callback"]
