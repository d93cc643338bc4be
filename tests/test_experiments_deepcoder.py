"""experiments/bench/bench_deepcoder.py: the load and other processes' CPU are printed and each ratio says which side it
favours."""

from experiments.bench import bench_deepcoder as bench


def test_output_names_the_load_and_the_ratios_direction(monkeypatch, capsys):
    monkeypatch.setattr(bench, "BATCHES", (1, 2))
    monkeypatch.setattr(bench, "grade_episodes", lambda batch, episodes: (10 * batch.batch_size, 1.0))
    bench.main(["--episodes", "2", "--repeats", "3"])
    out = capsys.readouterr().out
    assert "1-minute load average" in out and "during the timed calls" in out
    assert "above 1: the first is faster" in out
    assert "batch 2 / batch 1 at 1 test(s) at once: 2.00x" in out
