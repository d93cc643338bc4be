"""The package works installed (`pip install .`, not editable): a config is checked and `--print_config` runs
without the checkout's folders on the path (config validation once imported configs/base.py, which a package
install does not ship)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    target = tmp_path_factory.mktemp("site")
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation", "--no-index",
                    "--target", str(target), ROOT], check=True, capture_output=True, text=True, timeout=300)
    assert (target / "ragen_jax" / "config" / "schema.py").is_file() and not (target / "configs").exists()
    return target


def _run(args, cwd, target):
    env = {**os.environ, "PYTHONPATH": str(target), "JAX_PLATFORMS": "cpu"}
    return subprocess.run([sys.executable, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=300)


@pytest.mark.slow  # default run: too long for CI's 15 minutes on 2 cores
def test_the_installed_package_checks_a_config_on_its_own(installed, tmp_path):
    code = ("import ragen_jax; from ragen_jax.config import default_config, validate_config; "
            "cfg = default_config(); cfg.model.preset, cfg.model.path = 'tiny', ''; "
            "print(ragen_jax.__file__); print(validate_config(cfg).model.preset); "
            "cfg.trainer.totl_steps = 3; validate_config(cfg)")
    out = _run(["-c", code], tmp_path, installed)
    assert out.stdout.splitlines()[0].startswith(str(installed)), out.stdout  # the install, not the checkout
    assert out.stdout.splitlines()[1] == "tiny"
    assert "ConfigError" in out.stderr and "config.trainer.totl_steps is not a config key" in out.stderr, out.stderr


@pytest.mark.slow  # default run: too long for CI's 15 minutes on 2 cores
def test_print_config_of_a_tiny_config_runs_from_the_installed_package(installed, tmp_path):
    """A user's own folder with run.py and the config files, the library from the install."""
    shutil.copy(os.path.join(ROOT, "run.py"), tmp_path / "run.py")
    shutil.copytree(os.path.join(ROOT, "configs"), tmp_path / "configs")
    out = _run(["run.py", "--config", "configs/sokoban.py:tiny", "--print_config"], tmp_path, installed)
    assert out.returncode == 0, out.stderr[-2000:]
    assert '"preset": "tiny"' in out.stdout and "memory plan per device" in out.stdout
