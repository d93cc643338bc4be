"""experiments/studies/calibrate_regimes.py --points: calibrate on the saved points of several environments' arms."""

import importlib.util
import json
import math
import os

import pytest

SPEC = importlib.util.spec_from_file_location(
    "calibrate_regimes", os.path.join(os.path.dirname(__file__), "..", "experiments", "studies", "calibrate_regimes.py"))
calibrate_regimes = importlib.util.module_from_spec(SPEC)
SPEC.loader.exec_module(calibrate_regimes)


def _points(path, source, ranges):
    """A --json file with two points per arm at the ends of the given (H, MI / log N) ranges."""
    points = [dict(arm=arm, regime=calibrate_regimes.ARMS[arm][1], h=h, mi_rel=mi, step=1, seed=0, source=source)
              for arm, ((h0, h1), (m0, m1)) in ranges.items() for h, mi in ((h0, m0), (h1, m1))]
    path.write_text(json.dumps({"thresholds": {}, "report": {}, "points": points}))
    return str(path)


def test_points_of_two_environments_calibrate_together(tmp_path, capsys):
    a = _points(tmp_path / "a.json", "env_a", {"fixed": ((0.001, 0.002), (0.0, 0.001)),
                                              "state": ((0.01, 0.05), (0.35, 0.55)),
                                              "filler": ((2.1, 2.2), (0.0, 0.004)),
                                              "state_filler": ((0.9, 1.0), (0.23, 0.38))})
    b = _points(tmp_path / "b.json", "env_b", {"fixed": ((0.003, 0.03), (0.0, 0.0)),
                                              "state": ((0.1, 0.4), (0.17, 0.3)),
                                              "filler": ((2.1, 2.2), (0.0, 0.0)),
                                              "state_filler": ((1.4, 1.6), (0.044, 0.11))})
    out = tmp_path / "both.json"
    assert calibrate_regimes.main(["--points", a, b, "--json", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "env_a:" in printed and "env_b:" in printed and "1.000 of 16" in printed
    th = json.loads(out.read_text())["thresholds"]
    assert th["conditional_entropy"] == pytest.approx(math.sqrt(0.4 * 0.9))  # env_b's state vs env_a's state_filler
    assert th["mi"] == pytest.approx((0.004 + 0.044) / 2)
    assert calibrate_regimes.main(["--points", a, "--json", str(out)]) == 0  # env_a alone: a different cut
    assert json.loads(out.read_text())["thresholds"]["mi"] == pytest.approx((0.004 + 0.23) / 2)
    (tmp_path / "bad.json").write_text("{}")
    with pytest.raises(SystemExit, match="not a calibrate_regimes.py --json file"):
        calibrate_regimes.main(["--points", str(tmp_path / "bad.json")])
    with pytest.raises(SystemExit, match="--points .*missing.json: cannot read it as JSON"):
        calibrate_regimes.main(["--points", str(tmp_path / "missing.json")])
    (tmp_path / "torn.json").write_text('{"points": [')
    with pytest.raises(SystemExit, match="torn.json: cannot read it as JSON"):
        calibrate_regimes.main(["--points", str(tmp_path / "torn.json")])


def test_a_run_without_diagnostics_is_named_when_classified(tmp_path, capsys):
    """Before, --classify printed nothing at all for such a run, as if it had been classified."""
    a = _points(tmp_path / "a.json", "env_a", {"fixed": ((0.001, 0.002), (0.0, 0.001)),
                                              "state": ((0.01, 0.05), (0.35, 0.55)),
                                              "filler": ((2.1, 2.2), (0.0, 0.004)),
                                              "state_filler": ((0.9, 1.0), (0.23, 0.38))})
    plain = tmp_path / "plain_run"
    plain.mkdir()
    assert calibrate_regimes.main(["--points", a, "--classify", str(plain)]) == 0
    assert (f"plain_run                no diagnostics logged in {plain} (run it with --config.diagnostics.every=N"
            in capsys.readouterr().out)
