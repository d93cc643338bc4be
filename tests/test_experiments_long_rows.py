"""experiments/bench/long_rows_step.py: this checkout and a baseline alternate run by run, each run's step 1 (which
compiles) is left out, medians over runs, the load printed, the ratios baseline / ours labelled."""

import os
import re

import pytest

from experiments.bench import long_rows_step as bench


def _fake_scalars(seconds: float) -> dict:
    """TensorBoard scalars of a 3-step run: step 1 compiles (100 s), steps 2-3 take `seconds` and `seconds` + 2."""
    steps = {1: 100.0, 2: seconds, 3: seconds + 2}
    return {tag: [(s, v) for s, v in steps.items()] for tag in bench.SECONDS} | {
        "perf/trained_tokens": [(1, 2400.0), (2, 2500.0), (3, 2500.0)]}


def test_runs_alternate_and_the_ratios_leave_the_compiling_step_out(tmp_path, monkeypatch, capsys):
    baseline = tmp_path / "old"
    baseline.mkdir()
    (baseline / "run.py").write_text("")
    order = []
    speed = {str(baseline): iter([6.0, 10.0, 8.0]), str(bench.ROOT): iter([3.0, 1.0, 2.0])}

    def fake_run(repo, model, workdir, steps):
        order.append((repo, os.path.basename(workdir), steps))
        return _fake_scalars(next(speed[repo]))

    monkeypatch.setattr(bench, "write_checkpoint", lambda folder: None)
    monkeypatch.setattr(bench, "preflight", lambda repo, command: order.append(("preflight", repo)))
    monkeypatch.setattr(bench, "run_once", fake_run)
    bench.main(["--steps", "3", "--repeats", "3", "--baseline", str(baseline)])
    out = capsys.readouterr().out
    assert order == [("preflight", str(bench.ROOT)), ("preflight", str(baseline)),
                     (str(bench.ROOT), "ours_0", 3), (str(baseline), "baseline_0", 3),
                     (str(bench.ROOT), "ours_1", 3), (str(baseline), "baseline_1", 3),
                     (str(bench.ROOT), "ours_2", 3), (str(baseline), "baseline_2", 3)]
    assert "1-minute load average" in out and "during the timed calls" in out
    # per run: median of steps 2-3 (s + 1); per side: the median run (ours 3, baseline 9), not step 1's 100 s
    assert re.search(r"ours +rollout 3\.00 .*step 3\.00 +trained_tokens 2500\.00\n", out), out
    assert re.search(r"baseline +rollout 9\.00 ", out), out
    assert out.strip().splitlines()[-1] == ("RATIOS baseline / ours seconds (above 1: ours faster): rollout 3.00x, "
                                            "score_and_adv 3.00x, update 3.00x, step 3.00x")


def test_a_baseline_revision_is_unpacked_and_a_bad_one_named(tmp_path):
    folder = bench.baseline_checkout("HEAD", str(tmp_path / "base"))
    assert os.path.isfile(os.path.join(folder, "run.py"))
    assert os.path.isfile(os.path.join(folder, "experiments", "bench", "long_rows_step.py"))
    with pytest.raises(SystemExit, match="neither a folder nor a git revision"):
        bench.baseline_checkout("no-such-revision", str(tmp_path / "bad"))
    with pytest.raises(SystemExit, match="without run.py"):
        bench.baseline_checkout(str(tmp_path), str(tmp_path / "x"))


def test_one_step_is_refused(capsys):
    with pytest.raises(SystemExit):
        bench.main(["--steps", "1"])
    assert "--steps must be >= 2" in capsys.readouterr().err


@pytest.mark.slow
def test_both_sides_run_py_accept_the_exact_command_and_a_bad_flag_is_named(tmp_path):
    """The command main() runs, checked by this checkout's run.py and by the default baseline's (its own flags,
    validate_config and checkpoint loader), without training; an override that a run.py lacks fails, named."""
    model = str(tmp_path / "model")
    bench.write_checkpoint(model)
    command = bench.run_command(model, str(tmp_path / "run"), 3)
    baseline = bench.baseline_checkout(bench.DEFAULT_BASELINE, str(tmp_path / "baseline"))
    for repo in (str(bench.ROOT), baseline):
        bench.preflight(repo, command)
    with pytest.raises(SystemExit, match=r"refuses the long-row run's command \(.*no_such_key"):
        bench.preflight(str(bench.ROOT), command + ["--config.trainer.no_such_key=1"])
    with pytest.raises(SystemExit, match="refuses the long-row run's command .*No weights in"):
        os.remove(os.path.join(model, "model.safetensors"))
        bench.preflight(baseline, command)
