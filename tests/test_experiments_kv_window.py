"""experiments/bench/bench_kv_window.py: both sides interleaved and repeated, medians, the load line, the same greedy
tokens checked before timing, and the labelled ratio (windowed/baseline)."""

import pytest

from experiments.bench import bench_kv_window

SMALL = ["--hidden", "32", "--layers", "1", "--heads", "2", "--kv-heads", "1", "--head-dim", "16", "--vocab", "64",
         "--batch", "2", "--prompt", "8", "--new", "4", "--cache", "600"]


@pytest.mark.slow  # default run: too long for CI's 15 minutes on 2 cores
def test_small_run_is_interleaved_labelled_and_checks_tokens(capsys, monkeypatch):
    calls = []
    runner = bench_kv_window.runner

    def recording_runner(*args, **kwargs):
        call, attended = runner(*args, **kwargs)
        side = "windowed" if args[-1] else "baseline"
        return (lambda n: (calls.append((side, n)), call(n))[1]), attended
    monkeypatch.setattr(bench_kv_window, "runner", recording_runner)
    result = bench_kv_window.main(SMALL + ["--repeats", "3"])
    out = capsys.readouterr().out
    assert result["same_tokens"]
    timed = calls[2:]  # after one untimed full call per side
    assert len(timed) == 3 * 4 and all(a[0] != b[0] for a, b in zip(timed[::2], timed[1::2]))  # alternating
    assert "1-minute load average" in out and "medians of 3" in out and "other processes used" in out
    assert "ratio windowed/baseline" in out and "of the measured GEMM bound" in out
    assert "attends over 256 slots" in out and "attends over 600 slots" in out  # the window vs every slot


def test_default_repeats_is_at_least_three(monkeypatch):
    import argparse

    real = argparse.ArgumentParser.parse_args

    def stop_after_parsing(self, argv=None, namespace=None):
        raise SystemExit(real(self, argv, namespace).repeats)
    monkeypatch.setattr(argparse.ArgumentParser, "parse_args", stop_after_parsing)
    with pytest.raises(SystemExit) as stopped:
        bench_kv_window.main([])
    assert stopped.value.code >= 3
