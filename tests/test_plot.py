"""experiments/plot.py reads event files back with TensorBoard's reader and draws one panel per metric family."""

import importlib.util
import os

import pytest

from ragen_jax.monitoring import Monitor

SPEC = importlib.util.spec_from_file_location(
    "plot", os.path.join(os.path.dirname(__file__), "..", "experiments", "plot.py"))
plot = importlib.util.module_from_spec(SPEC)
SPEC.loader.exec_module(plot)


@pytest.fixture()
def two_runs(tmp_path):
    for run, scale in (("a", 1.0), ("b", 2.0)):
        m = Monitor(str(tmp_path / run / "tb"))
        for step in range(5):
            m.scalars({"val/Bandit/success": scale * step / 10, "actor/entropy": 1.0 - step / 10}, step)
        m.text("samples/trajectory", "not a scalar", 0)
        m.close()
    return [str(tmp_path / "a"), str(tmp_path / "b")]


def test_event_round_trip_and_png(two_runs, tmp_path):
    scalars = plot.read_scalars(two_runs[1])
    assert set(scalars) == {"val/Bandit/success", "actor/entropy"}
    assert [s for s, _ in scalars["val/Bandit/success"]] == [0, 1, 2, 3, 4]
    assert abs(scalars["val/Bandit/success"][-1][1] - 0.8) < 1e-6
    out = plot.plot_runs(two_runs, str(tmp_path / "c.png"))
    assert os.path.getsize(out) > 5000


def test_every_point_is_read_past_the_default_reservoir(tmp_path):
    """EventAccumulator keeps 10000 scalars by default and samples the rest; plot.py keeps them all."""
    m = Monitor(str(tmp_path / "long" / "tb"))
    for step in range(10_050):
        m.scalars({"actor/entropy": float(step)}, step)
    m.close()
    points = plot.read_scalars(str(tmp_path / "long"))["actor/entropy"]
    assert [s for s, _ in points] == list(range(10_050))


def test_unknown_metric_is_an_error_listing_the_known_tags(two_runs, tmp_path, capsys):
    with pytest.raises(ValueError, match=r"'val/Bandit/sucess'.*Known tags:\n  actor/entropy\n  val/Bandit/success"):
        plot.plot_runs(two_runs, str(tmp_path / "c.png"), {"x": ["val/Bandit/sucess"]})
    assert not (tmp_path / "c.png").exists()
    with pytest.raises(SystemExit) as e:
        plot.main([*two_runs, "--out", str(tmp_path / "d.png"), "--metrics", "actor/entropy,nope/*"])
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert "'nope/*'" in err and "val/Bandit/success" in err and "'actor/entropy'" not in err
    assert plot.main([*two_runs, "--out", str(tmp_path / "e.png"), "--metrics", "val/*/success"]) == 0


def test_a_folder_without_event_files_is_an_error(tmp_path):
    (tmp_path / "empty").mkdir()
    with pytest.raises(ValueError, match="No TensorBoard scalars"):
        plot.plot_runs([str(tmp_path / "empty")], str(tmp_path / "c.png"))


def test_regime_plane_of_each_run_side_by_side(tmp_path):
    """--regime draws each run's logged (H(Z|X), MI) path; a run's own thresholds come from its config.json."""
    import json

    import matplotlib.image

    prefix = "collapse_first_turn_sample"
    for run, shift in (("filter", 0.0), ("no_filter", 0.5)):
        m = Monitor(str(tmp_path / run / "tb"))
        for step in (1, 6, 11):
            m.scalars({f"{prefix}/conditional_entropy_est": 1.0 + shift, f"{prefix}/mi_estimate": 0.3 - step / 100,
                       f"{prefix}/mi_upper_bound": 4.1}, step)
        m.close()
    (tmp_path / "filter" / "config.json").write_text(json.dumps({"diagnostics": {"entropy_threshold": 0.8,
                                                                                  "mi_threshold": 0.1}}))
    runs = [str(tmp_path / "filter"), str(tmp_path / "no_filter")]
    out = plot.main([*runs, "--regime", prefix, "--out", str(tmp_path / "r.png")])
    assert out == 0
    image = matplotlib.image.imread(str(tmp_path / "r.png"))
    single = matplotlib.image.imread(plot.plot_regimes(runs[:1], str(tmp_path / "one.png"), prefix, columns=1)).shape
    assert image.shape[:2] == (single[0], 3 * single[1])  # three panels a row, the empty one white
    assert (image[:, 2 * single[1]:] == 1.0).all()
    assert plot.main([*runs, "--regime", prefix, "--columns", "1", "--out", str(tmp_path / "c.png")]) == 0
    assert matplotlib.image.imread(str(tmp_path / "c.png")).shape[:2] == (2 * single[0], single[1])
    with pytest.raises(ValueError, match="collapse_trajectory_sample/mi_estimate"):
        plot.plot_regimes(runs, str(tmp_path / "x.png"), "collapse_trajectory_sample")


def test_regime_thresholds_from_a_calibration_file(tmp_path, monkeypatch):
    """--thresholds FILE replaces each run's own thresholds; a bad file or key is one clear error."""
    import json

    from ragen_jax.diagnostics import plots

    prefix = "collapse_first_turn_sample"
    m = Monitor(str(tmp_path / "run" / "tb"))
    m.scalars({f"{prefix}/conditional_entropy_est": 0.1, f"{prefix}/mi_estimate": 1.2,
               f"{prefix}/mi_upper_bound": 2.77}, 1)
    m.close()
    (tmp_path / "run" / "config.json").write_text(json.dumps({"diagnostics": {"entropy_threshold": 0.8}}))
    seen = []
    real = plots.regime_plane_image
    monkeypatch.setattr(plots, "regime_plane_image", lambda *a, **k: seen.append(k["thresholds"]) or real(*a, **k))
    calibrated = {"conditional_entropy": 0.3, "mi": 0.2, "mi_relative": True}
    (tmp_path / "cal.json").write_text(json.dumps({"thresholds": calibrated, "points": []}))
    args = [str(tmp_path / "run"), "--regime", prefix, "--out", str(tmp_path / "r.png")]
    assert plot.main(args) == 0 and seen[-1] == {"conditional_entropy": 0.8}
    assert plot.main([*args, "--thresholds", str(tmp_path / "cal.json")]) == 0 and seen[-1] == calibrated
    (tmp_path / "bad.json").write_text(json.dumps({"thresholds": {"entropy": 0.3}}))
    (tmp_path / "list.json").write_text(json.dumps([0.3, 0.2]))
    for bad in ("bad.json", "missing.json", "list.json"):
        with pytest.raises(SystemExit):
            plot.main([*args, "--thresholds", str(tmp_path / bad)])


def test_regime_plane_needs_a_run_with_both_tags(tmp_path):
    """One run logged only the entropy and another only the MI: a clear error, not a numpy one."""
    prefix = "collapse_first_turn_sample"
    for run, tag in (("a", "conditional_entropy_est"), ("b", "mi_estimate")):
        m = Monitor(str(tmp_path / run / "tb"))
        m.scalars({f"{prefix}/{tag}": 1.0}, 1)
        m.close()
    with pytest.raises(ValueError, match="logged both"):
        plot.plot_regimes([str(tmp_path / "a"), str(tmp_path / "b")], str(tmp_path / "x.png"), prefix)


def test_regime_plane_of_a_run_without_diagnostics_says_what_to_turn_on(tmp_path, capsys):
    """A run that logged no diagnostics: one line naming --regime's tags and diagnostics.every, not --metrics."""
    m = Monitor(str(tmp_path / "run" / "tb"))
    m.scalars({"val/Bandit/success": 0.5}, 1)
    m.close()
    with pytest.raises(SystemExit) as e:
        plot.main([str(tmp_path / "run"), "--regime", "collapse_first_turn_sample", "--out", str(tmp_path / "r.png")])
    assert e.value.code == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "--config.diagnostics.every" in err and "--metrics" not in err


def test_a_runs_eval_outputs_stay_out_of_its_curves(tmp_path):
    """`run.py --mode=eval` writes RUN/eval/step_N/tb with the same val/* tags: plotting RUN keeps only the run's."""
    run = tmp_path / "run"
    m = Monitor(str(run / "tb"))
    for step in range(3):
        m.scalars({"val/Bandit/success": 0.1 * step}, step)
    m.close()
    m = Monitor(str(run / "eval" / "step_1" / "tb"))
    m.scalars({"val/Bandit/success": 0.9}, 1)
    m.close()
    assert [s for s, _ in plot.read_scalars(str(run))["val/Bandit/success"]] == [0, 1, 2]
    evaluated = plot.read_scalars(str(run / "eval" / "step_1"))["val/Bandit/success"]
    assert [(s, round(v, 6)) for s, v in evaluated] == [(1, 0.9)]


def test_calibrate_regimes_reads_labelled_runs_and_classifies_others(tmp_path, capsys):
    """experiments/studies/calibrate_regimes.py with --reuse: no run is started; the thresholds come from the points the
    four arms logged, and another run's points are classified with them."""
    import json
    import sys

    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "experiments"))
    spec = importlib.util.spec_from_file_location(
        "calibrate_regimes", os.path.join(os.path.dirname(__file__), "..", "experiments", "studies",
                                          "calibrate_regimes.py"))
    calib = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(calib)
    points = {"fixed": (0.004, 0.01), "state": (0.03, 1.6), "filler": (1.9, -0.02), "state_filler": (0.9, 1.3)}
    for arm, (h, mi) in points.items():
        run = tmp_path / "cal" / f"{arm}_seed0"
        m = Monitor(str(run / "tb"))
        for step, wiggle in ((1, 1.0), (5, 1.2)):
            m.scalars({f"{p}/{k}": v for p in calib.PREFIXES for k, v in (
                ("conditional_entropy_est", h * wiggle), ("mi_estimate", mi * wiggle), ("mi_upper_bound", 2.77))},
                step)
        m.close()
        (run / "summary.json").write_text("{}")
    other = tmp_path / "other"
    m = Monitor(str(other / "tb"))
    m.scalars({f"{calib.PREFIXES[0]}/{k}": v for k, v in (("conditional_entropy_est", 1.5),
                                                         ("mi_estimate", 0.05), ("mi_upper_bound", 2.77))}, 10)
    m.close()
    out = tmp_path / "cal.json"
    assert calib.main(["--seeds", "0", "--reuse", "--out", str(tmp_path / "cal"), "--json", str(out),
                       "--classify", str(other)]) == 0
    result = json.loads(out.read_text())
    th = result["thresholds"]
    assert result["report"]["accuracy"] == 1.0 and result["report"]["points"] == 16
    assert 0.036 < th["conditional_entropy"] < 0.9 and 0.01 / 2.77 < th["mi"] < 1.3 / 2.77
    assert "H 1.500 MI/logN +0.018: template_collapse" in capsys.readouterr().out


def test_runs_with_the_same_folder_name_keep_apart(tmp_path):
    """runs/a/seed0 and runs/b/seed0 used to share one label, so one of them vanished from the figure."""
    names = plot.run_names([str(tmp_path / "a" / "seed0"), str(tmp_path / "b" / "seed0"), str(tmp_path / "c")])
    assert names == ["a/seed0", "b/seed0", "c"]
    assert plot.run_names([str(tmp_path / "x"), str(tmp_path / "y")]) == ["x", "y"]
    with pytest.raises(ValueError, match="given twice"):
        plot.run_names([str(tmp_path / "x"), str(tmp_path / "x") + "/"])


def test_zscore_and_gradient_curves_of_each_run(tmp_path, capsys):
    """--zscore and --gradients draw each run's logged RAGEN-2 z-scores / gradient analysis; a run without them is
    named."""
    import matplotlib.image

    m = Monitor(str(tmp_path / "a" / "tb"))
    for step in (1, 51, 101):
        m.scalars({"collapse_first_turn_sample/mi_zscore": 1.0 / step, "collapse_first_turn_sample/mi_zscore_ema":
                   0.5, "collapse_first_turn_sample/retrieval_above_chance": 0.2,
                   **{f"grad_norm/{b}/{c}": step * (i + 1) for i, b in enumerate(("all", "bucket_1", "bucket_2"))
                      for c in ("task", "kl")}}, step)
    m.close()
    Monitor(str(tmp_path / "b" / "tb")).close()
    runs = [str(tmp_path / "a"), str(tmp_path / "b")]
    assert plot.main([*runs, "--zscore", "collapse_first_turn_sample", "--out", str(tmp_path / "z.png")]) == 0
    assert plot.main([*runs, "--gradients", "--out", str(tmp_path / "g.png")]) == 0
    z, g = (matplotlib.image.imread(str(tmp_path / f)) for f in ("z.png", "g.png"))
    assert z.shape[1] < g.shape[1]  # one z-score chart; two gradient panels (task, kl) of the one run with them
    with pytest.raises(SystemExit):
        plot.main([runs[1], "--gradients", "--out", str(tmp_path / "x.png")])
    assert "no gradient analysis" in capsys.readouterr().err
