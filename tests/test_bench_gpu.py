"""experiments/bench_gpu.py runs end to end on CPU with --smoke (the GPU numbers need a GPU machine)."""

import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.mark.slow
def test_bench_gpu_smoke_runs():
    proc = subprocess.run([sys.executable, os.path.join(ROOT, "experiments", "bench_gpu.py"), "--smoke"],
                          capture_output=True, text=True, timeout=600, env=dict(os.environ, JAX_PLATFORMS="cpu"))
    assert proc.returncode == 0, proc.stderr[-3000:]
    line = next(x for x in proc.stdout.splitlines() if x.startswith("tiny "))
    for key in ("decode_tokens_per_s", "decode_bound_tokens_per_s", "train_tflops", "mfu", "planned_train_gib", "train_xla_gib"):
        assert key in line
