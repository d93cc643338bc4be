"""A run folder's config.json: eval, diagnostics and resume continue from the run's own config, with only the
command line's explicit --config.K=V overrides applied and shown as changes (a run trained with 64 validation
episodes was evaluated on 512: the command line's config file had been rebuilt instead)."""

from __future__ import annotations

import json

import pytest

from configs.sokoban import get_config
from ragen_jax.config import ConfigError, validate_config
from ragen_jax.config.files import (config_changes, overrides_of, read_config_json, resolved_config,
                                    run_config_with_overrides, write_config_json)


def _trained_run(folder):
    cfg = get_config("tiny")
    cfg.val.groups, cfg.val.batch_size = 64, 64
    run = validate_config(cfg)
    write_config_json(str(folder), run, {})
    return run


def test_eval_reads_the_runs_config_and_shows_the_overrides_as_changes(tmp_path):
    trained = _trained_run(tmp_path)
    given = get_config("tiny")  # what the command line rebuilt: 512 validation episodes, another temperature
    given.val.temperature = 0.7
    argv = ["run.py", "--config=configs/sokoban.py:tiny", "--mode=eval", "--config.val.temperature=0.7",
            f"--workdir={tmp_path}"]
    run, changes = run_config_with_overrides(str(tmp_path), given, argv, "eval")
    assert run.val.groups == trained.val.groups == 64 and run.val.temperature == 0.7
    assert changes == ["val.temperature: 0.5 -> 0.7"]
    assert json.loads(resolved_config(run))["val"]["groups"] == 64


def test_without_a_config_json_the_command_lines_config_is_used(tmp_path):
    assert run_config_with_overrides(str(tmp_path), get_config("tiny"), ["run.py"], "eval") == (None, [])
    assert read_config_json(str(tmp_path)) is None
    (tmp_path / "config.json").write_text("[not a run config]")
    assert read_config_json(str(tmp_path)) is None


def test_an_override_of_a_key_the_run_lacks_is_refused(tmp_path):
    _trained_run(tmp_path)
    with pytest.raises(ConfigError, match=r"--config.env.kwargs.dim_x is not a key of the run's config"):
        run_config_with_overrides(str(tmp_path), get_config("tiny"), ["run.py", "--config.env.kwargs.dim_x=5"],
                                  "eval")


def test_overrides_are_read_in_both_spellings():
    argv = ["run.py", "--config.a.b=1", "--config.c", "2", "--mode=eval", "--config.d=x=y"]
    assert overrides_of(argv) == {"a.b": "1", "c": "2", "d": "x=y"}


def test_config_changes_list_each_setting_once_and_count_the_rest():
    before = {"a": {"x": 1, "y": 2}, "workdir": "w", "trainer": {"resume": False}}
    after = {"a": {"x": 3, "z": 4}, "workdir": "v", "trainer": {"resume": True}}
    assert config_changes(before, after) == ["a.x: 1 -> 3", "a.y: 2 -> (absent)", "a.z: (absent) -> 4"]
    assert config_changes(before, after, limit=1) == ["a.x: 1 -> 3", "... and 2 more"]
