"""experiments/sweep.py: the grid expands to one run (and workdir) per point."""

import importlib.util
import os

import pytest

SPEC = importlib.util.spec_from_file_location(
    "sweep", os.path.join(os.path.dirname(__file__), "..", "experiments", "sweep.py"))
sweep = importlib.util.module_from_spec(SPEC)
SPEC.loader.exec_module(sweep)


def test_grid_product_and_overrides():
    grid = sweep.parse_grid(["filter.value=1.0,0.9", "trainer.seed=0,1,2"])
    runs = sweep.run_commands("configs/sokoban.py:tiny", "/r", grid, ["--config.trainer.total_steps=3"])
    assert len(runs) == 6
    name, argv = runs[1]
    assert name == "filter.value=1.0,trainer.seed=1"
    assert "--workdir=/r/filter.value=1.0,trainer.seed=1" in argv
    assert "--config.filter.value=1.0" in argv and "--config.trainer.seed=1" in argv
    assert argv[-1] == "--config.trainer.total_steps=3"


def test_bad_grid_item():
    with pytest.raises(SystemExit):
        sweep.parse_grid(["novalue"])
    for item in ("a=1,,2", "a=1,", "a=(6,6", "a='x,y"):
        with pytest.raises(SystemExit, match="empty value|unclosed"):
            sweep.parse_grid([item])


def test_grid_values_keep_commas_inside_quotes_and_brackets():
    grid = sweep.parse_grid(["model.lora.target_modules=\"q_proj,v_proj\",'q_proj,k_proj,v_proj,o_proj'",
                             "a=(6,6),[1, 2],3"])
    assert grid == [("model.lora.target_modules", ["q_proj,v_proj", "q_proj,k_proj,v_proj,o_proj"]),
                    ("a", ["(6,6)", "[1, 2]", "3"])]
    runs = sweep.run_commands("configs/sokoban.py:tiny", "/r", grid[:1], [])
    assert [argv[-1] for _, argv in runs] == ["--config.model.lora.target_modules=q_proj,v_proj",
                                            "--config.model.lora.target_modules=q_proj,k_proj,v_proj,o_proj"]


FAKE_RUN = """
import json, os, sys
args = dict(a[2:].split("=", 1) for a in sys.argv[1:] if a.startswith("--") and "=" in a)
workdir = args["workdir"]
with open(os.path.join(os.path.dirname(workdir), "calls.txt"), "a") as f:
    f.write(os.path.basename(workdir) + "\\n")
if args.get("config.trainer.seed") == "1":
    print("progress\\rFATAL boom: the reason")
    sys.exit(3)
with open(os.path.join(workdir, "summary.json"), "w") as f:
    json.dump({"val_success_start": 0.1, "val_success_final": 0.625, "val_success_best": 0.75, "steps_run": 2,
               "wall_time_s": 12.3, "stop_reason": None}, f)
print("trained")
"""


def _sweep(root, extra, capsys):
    code = sweep.main(["--config", "configs/sokoban.py:tiny", "--root", str(root), "--grid", "trainer.seed=0,1",
                       "--", *extra])
    return code, capsys.readouterr().out


@pytest.mark.slow  # default run: too long for CI's 15 minutes on 2 cores
def test_sweep_reports_failures_compares_runs_and_reruns_only_what_did_not_finish(tmp_path, monkeypatch, capsys):
    """A failed point does not stop the sweep and says why; the end table compares the points' summaries; a rerun
    skips the finished point (same command), retries the failed one and keeps its earlier log."""
    fake = tmp_path / "fake_run.py"
    fake.write_text(FAKE_RUN)
    monkeypatch.setattr(sweep, "RUN_PY", str(fake))
    root = tmp_path / "sweep"
    code, out = _sweep(root, ["--config.trainer.total_steps=2"], capsys)
    assert code == 1
    assert "finished trainer.seed=1: exit 3 (FATAL boom: the reason)" in out
    rows = {line.split()[0]: line.split() for line in out.splitlines() if line.startswith("trainer.seed=")}
    assert rows["trainer.seed=0"][1:6] == ["ok", "10.0%", "-", "62.5%", "75.0%"]
    assert rows["trainer.seed=1"][1:4] == ["exit", "3", "-"]
    assert "1/2 runs succeeded" in out
    assert (root / "results.csv").read_text().splitlines()[1].startswith("trainer.seed=0,ok,10.0%,-,62.5%")

    (root / "trainer.seed=1" / "summary.json").write_text('{"val_success_final": 0.5}')  # an earlier run's
    code, out = _sweep(root, ["--config.trainer.total_steps=2"], capsys)
    rows = {line.split()[0]: line.split() for line in out.splitlines() if line.startswith("trainer.seed=")}
    assert rows["trainer.seed=0"][1:4] == ["done", "before", "10.0%"]
    assert rows["trainer.seed=1"][1:7] == ["exit", "3", "-", "-", "-", "-"]  # not the earlier run's figures
    assert code == 1 and "skipped trainer.seed=0" in out and "started trainer.seed=0" not in out
    assert (root / "calls.txt").read_text().split() == ["trainer.seed=0", "trainer.seed=1", "trainer.seed=1"]
    assert (root / "trainer.seed=1" / "log.txt").read_text().count("FATAL boom") == 2  # both attempts kept

    code, out = _sweep(root, ["--config.trainer.total_steps=3"], capsys)  # another command: not the run done before
    assert "started trainer.seed=0" in out and "skipped" not in out


def test_a_failed_points_reason_is_its_fatal_line_with_every_error_under_it(tmp_path, monkeypatch, capsys):
    """The reason was the log's last line: absl's help hint under a flag error, or only the last of an invalid
    config's errors; and an earlier attempt's FATAL line does not stand in for this attempt's traceback."""
    fake = tmp_path / "fake_run.py"
    fake.write_text("print('FATAL Invalid config:\\n  - config.env.groups must be > 0 (got 0)\\n"
                    "  - config.val.batch_size must be a multiple of config.val.group_size\\nsome later line')\n"
                    "raise SystemExit(1)\n")
    monkeypatch.setattr(sweep, "RUN_PY", str(fake))
    code, out = _sweep(tmp_path / "sweep", [], capsys)
    assert code == 1
    assert ("finished trainer.seed=0: exit 1 (FATAL Invalid config: - config.env.groups must be > 0 (got 0) "
            "- config.val.batch_size must be a multiple of config.val.group_size)") in out, out
    log = tmp_path / "log.txt"
    log.write_text("=== 2026-12-05 run.py ...\nFATAL first attempt\n=== 2026-12-05 run.py ...\nTraceback (most "
                   "recent call last):\n  File \"x.py\", line 1\nRuntimeError: second attempt\n")
    assert sweep.failure_reason(str(log)) == "RuntimeError: second attempt"


def test_a_grid_key_the_config_lacks_stops_the_sweep_before_any_run(tmp_path, capsys):
    """Before, every point started and failed a few seconds in on the same unknown key."""
    config = os.path.join(os.path.dirname(__file__), "..", "configs", "sokoban.py") + ":tiny"
    assert sweep.unknown_grid_keys(config, ["trainer.total_steps", "filter.value", "env.kwargs.dim_room"]) == []
    problems = sweep.unknown_grid_keys(config, ["trainer.totl_steps", "filtr.value"])
    assert problems[0].endswith("has no config key trainer.totl_steps (did you mean trainer.total_steps?)")
    assert problems[1].endswith("has no config key filtr (did you mean filter?)")
    with pytest.raises(SystemExit, match="trainer.totl_steps"):
        sweep.main(["--config", config, "--root", str(tmp_path / "sweep"), "--grid", "trainer.totl_steps=1,2"])
    assert not (tmp_path / "sweep").exists()
