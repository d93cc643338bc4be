"""experiments/bench/bench_env_server.py: the server and the in-process baseline alternate block by block, >= 3 blocks
each by default, medians reported with the load line."""

import pytest

from experiments.bench import bench_env_server


@pytest.mark.slow  # default run: too long for CI's 15 minutes on 2 cores
def test_small_run_alternates_blocks_and_reports_medians(capsys):
    result = bench_env_server.main(["--env", "WebShop", "--episodes", "2", "--duration", "0.3",
                                    "--baseline-duration", "0.2"])
    out = capsys.readouterr().out
    assert "1-minute load average" in out
    assert [line.split(":")[0] for line in out.splitlines() if line.startswith("block ")] == [
        "block 1/3", "block 2/3", "block 3/3"]
    assert result["blocks_per_side"] == 3 and result["errors"] == 0 and result["steps"] > 0
    assert result["server_steps_per_s_median"] > 0 and result["baseline_inprocess_steps_per_s_median"] > 0
    assert result["ratio_server_over_inprocess_steps_per_s"] == pytest.approx(
        result["server_steps_per_s_median"] / result["baseline_inprocess_steps_per_s_median"], abs=1e-3)
