"""experiments/bench/bench_cross_score.py: both scorers agree at the smallest setting, and a disagreement exits non-zero."""

import numpy as np
import pytest

from experiments.bench import bench_cross_score as bench

SMALL = ["--pairs", "2", "--prompt-len", "5", "--reason-len", "3", "--batch-size", "4", "--repeats", "1"]


@pytest.mark.slow  # default run: too long for CI's 15 minutes on 2 cores
def test_smallest_setting_runs_and_prints_the_load_and_a_labelled_ratio(capsys):
    bench.main(SMALL)
    out = capsys.readouterr().out
    assert "1-minute load average" in out and "during the timed calls" in out
    assert "above 1: ours faster" in out


def test_scores_that_disagree_stop_the_benchmark(monkeypatch):
    naive = bench.naive_cross_score
    monkeypatch.setattr(bench, "naive_cross_score", lambda *a: naive(*a) + 0.5)
    with pytest.raises(SystemExit, match="disagree"):
        bench.main(SMALL)


def test_short_rows_keep_at_least_one_token():
    rng = np.random.default_rng(0)
    assert all(1 <= len(bench.random_tokens(rng, 50, n)) <= n for n in (1, 2, 3, 17, 40) for _ in range(20))
