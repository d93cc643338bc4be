"""experiments/studies/diagnostics_example.py draws the offline report beside the regime plane, or says why it cannot."""

import importlib.util
import json
import os

import numpy as np

SPEC = importlib.util.spec_from_file_location(
    "diagnostics_example", os.path.join(os.path.dirname(__file__), "..", "experiments", "studies", "diagnostics_example.py"))
example = importlib.util.module_from_spec(SPEC)
SPEC.loader.exec_module(example)
P = "collapse_first_turn_sample"


def _fake_cli(report: dict):
    """The offline CLI's stand-in: prints a line and writes `report` to its --out."""
    def main(argv):
        print("the report")
        with open(argv[argv.index("--out") + 1], "w") as f:
            json.dump(report, f)
        return 0
    return main


def _run_folder(path, entropy_threshold=0.3):
    path.mkdir()
    (path / "config.json").write_text(json.dumps({"diagnostics": {"entropy_threshold": entropy_threshold}}))
    return str(path)


def test_a_report_without_reasoning_fails_with_one_line_naming_what_to_turn_on(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(example, "diagnostics_main", _fake_cli({"timing_s/collapse_first_turn_step": 0.1}))
    run, out = _run_folder(tmp_path / "run"), tmp_path / "plane.png"
    assert example.main(["dump.jsonl", "--checkpoint", run, "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "warmstart.reasoning_text" in err and "diagnostics.every" in err
    assert not out.exists()


def test_the_plane_uses_the_run_folders_thresholds(tmp_path, monkeypatch):
    monkeypatch.setattr(example, "diagnostics_main", _fake_cli(
        {f"{P}/conditional_entropy_est": 0.5, f"{P}/mi_estimate": 0.4, f"{P}/mi_upper_bound": 2.0}))
    seen = {}

    def plane(h, mi, steps, **kwargs):
        seen.update(kwargs, h=h, mi=mi, steps=steps)
        return np.full((10, 10, 3), 255, np.uint8)

    monkeypatch.setattr(example, "regime_plane_image", plane)
    out = tmp_path / "plane.png"
    assert example.main(["dump.jsonl", "--checkpoint", _run_folder(tmp_path / "run"), "--step", "4",
                         "--out", str(out)]) == 0
    assert out.exists() and (seen["h"], seen["mi"], seen["steps"]) == ([0.5], [0.4], [4])
    assert seen["thresholds"]["conditional_entropy"] == 0.3 and seen["mi_upper_bound"] == 2.0


def test_the_clis_log_lines_are_printed_once(tmp_path, monkeypatch, capsys):
    """The CLI logs "policy: ..." and "rollouts: ..."; they reached the terminal twice (through the root handler,
    then in the captured report the script prints)."""
    import logging
    import sys

    report = {f"{P}/conditional_entropy_est": 0.5, f"{P}/mi_estimate": 0.4, f"{P}/mi_upper_bound": 2.0}
    quiet_cli = _fake_cli(report)

    def logging_cli(argv):
        logging.getLogger("ragen_jax.diagnostics.offline").info("policy: the folder")
        return quiet_cli(argv)

    monkeypatch.setattr(example, "diagnostics_main", logging_cli)
    monkeypatch.setattr(example, "regime_plane_image", lambda *a, **k: np.full((10, 10, 3), 255, np.uint8))
    root = logging.StreamHandler(sys.stderr)  # as the CLI's logging.basicConfig sets up
    logging.getLogger().addHandler(root)
    logging.getLogger("ragen_jax.diagnostics").setLevel(logging.INFO)
    try:
        assert example.main(["dump.jsonl", "--checkpoint", _run_folder(tmp_path / "run"),
                             "--out", str(tmp_path / "plane.png")]) == 0
    finally:
        logging.getLogger().removeHandler(root)
        logging.getLogger("ragen_jax.diagnostics").setLevel(logging.NOTSET)
    captured = capsys.readouterr()
    assert (captured.out + captured.err).count("policy: the folder") == 1
    assert logging.getLogger("ragen_jax.diagnostics").propagate
