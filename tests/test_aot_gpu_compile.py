"""Deviceless compiles for an H100 and an H200 (slow; needs jax-cuda12-plugin, requirements-gpu-aot.txt, and
JAX_PLATFORMS=cpu): every program compiles for 1 GPU and for a mesh of 8 at small shapes, cuDNN's fused attention
included, and at Qwen2.5-0.5B/3B/7B shapes the memory planner is within 10% of XLA's GPU bytes for the update and
the sampler.

    JAX_PLATFORMS=cpu .venv-gpu-aot/bin/python -m pytest -m slow tests/test_aot_gpu_compile.py
"""

from __future__ import annotations

import os
import sys

import pytest

from ragen_jax.aot import gpu as G
from ragen_jax.aot import programs as P

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(G.plugin_missing() is not None, reason=str(G.plugin_missing())),
              pytest.mark.skipif(os.environ.get("JAX_PLATFORMS") != "cpu",
                                 reason="deviceless compiles run with JAX_PLATFORMS=cpu (the GPU is not there)")]
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "experiments", "bench"))
FUSED = "__cudnn$fmhaSoftmax"


@pytest.mark.parametrize("gpu", ["h100", "h200"])
@pytest.mark.parametrize("devices", [1, 8])
def test_every_program_compiles_for_the_gpu_at_small_shapes(gpu, devices):
    import aot_testlib as L
    from ragen_jax.sharding import make_mesh

    mesh = make_mesh(L.MESH if devices == 8 else (1, 1, 1), G.gpu_topology(gpu, devices))
    build = P.Build(L.gpu_shaped_config(), L.sizes(), mesh)
    for name in P.PROGRAMS:
        on = None if name in P.SINGLE_DEVICE else mesh
        compiled = G.compile_for_gpu(P.build(name, P.Build(build.config, build.sizes, on, build.cfg)), on)
        stats = G.compiled_stats(compiled)
        assert stats.argument > 0 and stats.peak >= stats.argument - stats.alias, name
        if name.startswith("update/"):  # the fused kernel survives the compile (no silent XLA fallback)
            assert FUSED + "Backward" in compiled.as_text(), name


@pytest.mark.parametrize("model", ["0.5b", "3b", "7b"])
@pytest.mark.parametrize("gpu", ["h100", "h200"])
@pytest.mark.parametrize("devices", [1, 8])
def test_the_planner_is_within_10_percent_of_the_compiled_gpu_programs(model, gpu, devices):
    from gpu_aot import CORE, MODELS, measure, run_sizes

    from ragen_jax.models.known import known_config

    cfg = P.default_run_config()
    rows = measure(model, known_config(MODELS[model], param_dtype="bfloat16"), devices, [gpu], list(CORE),
                   run_sizes(cfg), cfg, log=lambda *_: None)
    assert not [r for r in rows if "error" in r], rows
    phases = {r["phase"]: r for r in rows if "phase" in r}
    assert set(phases) == {"training", "sampling"}
    for r in phases.values():
        assert 0.9 <= r["planned_over_compiled"] <= 1.1, r
    decode = next(r for r in rows if r.get("program") == "lockstep/decode")
    assert decode["step_bound_s"] == pytest.approx(decode["argument"] / G.GPUS[gpu]["bandwidth"])
