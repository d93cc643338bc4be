"""experiments/studies/mi_table.py lists a run's collapse diagnostics step by step and names template collapse."""

import importlib.util
import os

import pytest

from ragen_jax.monitoring import Monitor

SPEC = importlib.util.spec_from_file_location(
    "mi_table", os.path.join(os.path.dirname(__file__), "..", "experiments", "studies", "mi_table.py"))
mi_table = importlib.util.module_from_spec(SPEC)
SPEC.loader.exec_module(mi_table)
P = "collapse_first_turn_sample"


def _run(path, mi, h):
    m = Monitor(str(path / "tb"))
    m.scalars({"val/Sokoban/success": 0.5}, 0)
    for i, step in enumerate((1, 5, 10)):
        m.scalars({f"{P}/mi_estimate": mi[i], f"{P}/conditional_entropy_est": h[i], f"{P}/mi_upper_bound": 2.77,
                   f"{P}/retrieval_accuracy": 0.5, f"{P}/retrieval_chance_level": 0.06, f"{P}/regime": 0.0,
                   "train/Sokoban/success": 0.1 * step}, step)
    m.scalars({"val/Sokoban/success": 0.7}, 10)
    m.close()
    return str(path)


def test_table_rows_and_the_collapse_verdict(tmp_path, capsys):
    collapsing = _run(tmp_path / "a", mi=[1.5, 1.0, 0.4], h=[1.0, 1.1, 1.0])
    steady = _run(tmp_path / "b", mi=[1.5, 1.6, 1.5], h=[0.02, 0.02, 0.03])
    rows = mi_table.run_table(collapsing, P)
    assert [r["step"] for r in rows] == [1, 5, 10]
    assert rows[0]["val"] == 0.5 and rows[-1]["val"] == pytest.approx(0.7) and rows[1]["train"] == pytest.approx(0.5)
    assert "template collapse (MI down >10% and >5% of log N, H(Z|X) held): yes" in mi_table.summary(rows)
    assert mi_table.summary(mi_table.run_table(steady, P)).endswith("no")
    never = _run(tmp_path / "c", mi=[2e-4, 1e-4, -1e-4], h=[0.001, 0.001, 0.001])  # one fixed text: no MI to lose
    assert mi_table.summary(mi_table.run_table(never, P)).endswith("no")
    assert mi_table.main([collapsing, steady]) == 0
    assert capsys.readouterr().out.count("diverse") == 6
    with pytest.raises(SystemExit):
        mi_table.main([collapsing, "--prefix", "collapse_trajectory_sample"])
    assert "--config.diagnostics.every" in capsys.readouterr().err


def test_lead_lag_names_what_moved_first():
    row = lambda step, mi, val: dict(step=step, mi=mi, val=val, bound=2.77)  # noqa: E731
    mi_first = [row(1, 1.5, 0.60), row(5, 1.1, 0.61), row(10, 0.9, 0.50)]
    assert mi_table.lead_lag(mi_first) == "MI moved first at step 5, success at step 10"
    success_first = [row(1, 1.5, 0.60), row(5, 1.5, 0.70), row(10, 1.0, 0.70)]
    assert mi_table.lead_lag(success_first) == "success moved first at step 5, MI at step 10"
    assert mi_table.lead_lag([row(1, 1.5, 0.6), row(5, 1.6, 0.62)]).startswith("neither")
    assert mi_table.lead_lag([row(1, 1.5, 0.6), row(5, 1.5, 0.7)]) == "validation success moved (step 5); MI never did"
    assert "same diagnostics step (5)" in mi_table.lead_lag([row(1, 1.5, 0.6), row(5, 1.0, 0.7)])


def test_markdown_row_reads_the_summary(tmp_path, capsys):
    run = _run(tmp_path / "r", mi=[1.5, 1.0, 0.4], h=[1.0, 1.1, 1.0])
    (tmp_path / "r" / "summary.json").write_text(
        '{"val_success_after_warmstart": 0.5, "val_success_final": 0.7, "val_success_best": 0.75,'
        ' "updates_applied": 12, "mean_kept_ratio": 0.33}')
    row = mi_table.markdown_row(run, mi_table.run_table(run, P))
    assert row == ("| r | 50.0% -> 70.0% (75.0%) | 1.50 -> 0.40; 0.40-1.50 | 2.77-2.77 | 1.000-1.100 | 0.50-0.50; "
                   "0.060-0.060 | diverse | yes | MI moved first at step 5, success at step 10 | 12, 33% |")
    assert mi_table.main([run, "--markdown"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == mi_table.MARKDOWN_HEADER.splitlines()[0] and out[2] == row


def test_thresholds_reclassify_the_logged_regime(tmp_path, capsys):
    """The run logged 'diverse' for every step; a thresholds file re-classifies from (H(Z|X), MI, log N)."""
    run = _run(tmp_path / "r", mi=[1.5, 1.0, 0.02], h=[1.0, 0.1, 0.1])
    th = {"conditional_entropy": 0.5, "mi": 0.1, "mi_relative": True}
    rows = mi_table.run_table(run, P, th)
    assert [mi_table.REGIMES[r["regime"]] for r in rows] == ["diverse", "compressed", "low_entropy_collapse"]
    assert {r["regime"] for r in mi_table.run_table(run, P)} == {0.0}  # as logged
    (tmp_path / "th.json").write_text('{"thresholds": {"conditional_entropy": 0.5, "mi": 0.1, "mi_relative": true}}')
    assert mi_table.main([run, "--markdown", "--thresholds", str(tmp_path / "th.json")]) == 0
    assert "| compressed, diverse, low_entropy_collapse |" in capsys.readouterr().out
    (tmp_path / "bad.json").write_text("[1, 2]")
    with pytest.raises(SystemExit):
        mi_table.main([run, "--thresholds", str(tmp_path / "bad.json")])
