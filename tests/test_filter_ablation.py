"""experiments/studies/filter_ablation.py reports each arm as docs/quickstart.md does: mean +- sample std over seeds."""

import importlib.util
import os

SPEC = importlib.util.spec_from_file_location(
    "filter_ablation", os.path.join(os.path.dirname(__file__), "..", "experiments", "studies", "filter_ablation.py"))
filter_ablation = importlib.util.module_from_spec(SPEC)
SPEC.loader.exec_module(filter_ablation)


def test_arm_line_is_mean_and_sample_std_as_the_docs_quote():
    # docs/quickstart.md's three seeds: no filter 79.5 +- 4.8, top_p 0.9 81.5 +- 4.7 (sample std, ddof 1).
    line = filter_ablation.arm_line({"no_filter": [0.740, 0.816, 0.828], "top_p_0.9": [0.762, 0.828, 0.854]})
    assert "no_filter: 0.795 +- 0.048 (n=3)" in line
    assert "top_p_0.9: 0.815 +- 0.047 (n=3)" in line
    assert "sample std" in line


def test_arm_line_with_one_seed_has_no_spread():
    assert "no_filter: 0.700 +- - (n=1)" in filter_ablation.arm_line({"no_filter": [0.7], "top_p_0.9": []})


def test_runs_that_fail_are_named_and_make_the_script_fail(tmp_path, monkeypatch, capsys):
    """Before, the script returned 0 whatever its runs did, and a failed run beside an earlier run's summary.json
    was read as if it had produced it."""
    import json
    import sys

    out = tmp_path / "ablation"

    def fake_runs(jobs, parallel):
        codes = {}
        for workdir, _argv in jobs:
            os.makedirs(workdir, exist_ok=True)
            with open(os.path.join(workdir, "summary.json"), "w") as f:  # the failed one's is an earlier run's
                json.dump({"val_success_start": 0.0, "val_success_final": 0.5, "val_success_best": 0.5}, f)
            codes[workdir] = 1 if workdir.endswith("top_p_0.9_seed1") else 0
        return codes

    monkeypatch.setattr(filter_ablation, "run_all", fake_runs)
    monkeypatch.setattr(filter_ablation.plot, "plot_runs", lambda runs, path, panels: path)
    monkeypatch.setattr(sys, "argv", ["filter_ablation.py", "--seeds", "0,1", "--out", str(out)])
    assert filter_ablation.main() == 1
    printed = capsys.readouterr().out
    assert "top_p_0.9 seed 1: FAILED (exit code 1; see" in printed
    assert "top_p_0.9: 0.500 +- - (n=1)" in printed  # the failed run is not averaged in
    assert "1 of 4 runs failed (top_p_0.9 seed 1)" in printed
    monkeypatch.setattr(filter_ablation, "run_all", lambda jobs, parallel: dict.fromkeys(fake_runs(jobs, 1), 0))
    assert filter_ablation.main() == 0
