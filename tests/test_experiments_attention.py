"""experiments/bench/bench_attention.py: both sides compute the same output (and gradients with --backward), and the
printed figures are labelled (medians, load, GEMM bound, ratio direction)."""

import pytest

from experiments.bench import bench_attention

SMALL = ["--batch", "1", "--length", "64", "--heads", "2", "--kv-heads", "1", "--head-dim", "8", "--repeats", "3"]


@pytest.mark.parametrize("backward", [False, True])
def test_small_run_compares_outputs_and_gradients(capsys, backward):
    result = bench_attention.main(SMALL + (["--backward"] if backward else []))
    out = capsys.readouterr().out
    assert set(result["diffs"]) == ({"output", "dq", "dk", "dv"} if backward else {"output"})
    assert all(d < 1e-4 for d in result["diffs"].values()), result["diffs"]
    assert "1-minute load average" in out and "medians of 3" in out and "other processes used" in out
    assert "of the measured GEMM bound" in out and "ratio ours/torch speed" in out


def test_flops_count_the_causal_half_and_three_times_with_backward():
    forward = bench_attention.attention_flops(2, 4, 3, 8, backward=False)
    assert forward == 2 * 2.0 * 2 * 3 * 8 * 10  # QK^T and AV over 4 * 5 / 2 = 10 kept pairs per head
    assert bench_attention.attention_flops(2, 4, 3, 8, backward=True) == 3 * forward
