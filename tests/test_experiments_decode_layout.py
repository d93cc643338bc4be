"""experiments/bench/bench_decode_layout.py: the gemm part labels its ratio and stops when the layouts disagree."""

import pytest

from experiments.bench import bench_decode_layout as bench
from ragen_jax.models import tiny_config


@pytest.fixture
def small(monkeypatch):
    monkeypatch.setattr(bench, "QWEN25_05B", tiny_config())  # 2 layers of 128 -> 2 x 384 -> 128
    monkeypatch.setattr(bench, "stream_bytes_per_s", lambda: 1e10)  # not the 1 GiB measurement


def test_gemm_part_labels_its_ratio(small, capsys):
    bench.gemm_part(rows=2, repeats=1)
    assert "(above 1: out_first faster)" in capsys.readouterr().out


def test_gemm_part_exits_when_the_layouts_disagree(small, monkeypatch):
    right = bench.out_first_matmul
    monkeypatch.setattr(bench, "out_first_matmul", lambda x, w: 2.0 * right(x, w))
    with pytest.raises(SystemExit, match="differ"):
        bench.gemm_part(rows=2, repeats=1)
