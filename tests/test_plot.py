"""experiments/plot.py reads tensorboardX event files back and draws one panel per metric family."""

import importlib.util
import os

from ragen_jax.monitoring import Monitor

SPEC = importlib.util.spec_from_file_location(
    "plot", os.path.join(os.path.dirname(__file__), "..", "experiments", "plot.py"))
plot = importlib.util.module_from_spec(SPEC)
SPEC.loader.exec_module(plot)


def test_event_round_trip_and_png(tmp_path):
    for run, scale in (("a", 1.0), ("b", 2.0)):
        m = Monitor(str(tmp_path / run / "tb"))
        for step in range(5):
            m.scalars({"val/Bandit/success": scale * step / 10, "actor/entropy": 1.0 - step / 10}, step)
        m.close()
    scalars = plot.read_scalars(str(tmp_path / "b"))
    assert [s for s, _ in scalars["val/Bandit/success"]] == [0, 1, 2, 3, 4]
    assert abs(scalars["val/Bandit/success"][-1][1] - 0.8) < 1e-6
    out = plot.plot_runs([str(tmp_path / "a"), str(tmp_path / "b")], str(tmp_path / "c.png"))
    assert os.path.getsize(out) > 5000
