"""experiments/bench_gpu.py runs end to end on CPU with --smoke (the GPU numbers need a GPU machine);
bench_kv_window.py compares windowed and full-cache decoding on the same tokens."""

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


def test_bench_kv_window_reports_both_and_the_same_tokens():
    sys.path.insert(0, os.path.join(ROOT, "experiments"))
    from bench_kv_window import main

    r = main(["--hidden", "64", "--layers", "2", "--heads", "4", "--kv-heads", "2", "--head-dim", "16", "--vocab", "256",
              "--batch", "2", "--prompt", "20", "--new", "64", "--cache", "600"])
    assert r["same_tokens"]
    assert r["windowed"]["decode_tokens_per_s"] > 0 and r["full"]["decode_tokens_per_s"] > 0
