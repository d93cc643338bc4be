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
