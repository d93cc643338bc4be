"""experiments/bench_envs.py: every measurement repeated and interleaved, the load printed, the ratios labelled."""

import types

from experiments import bench_envs as bench


class _FakeSokobanEnv:
    """gym-sokoban's SokobanEnv surface that bench_gym_steps uses (the package is not installed here)."""

    def __init__(self, **kw):
        self.steps = 0

    def reset(self, render_mode):
        self.steps = 0

    def step(self, action, observation_mode):
        self.steps += 1
        return None, 0.0, self.steps % 7 == 0, {}


def test_smallest_setting_prints_medians_load_and_labelled_ratios(monkeypatch, capsys):
    calls = []
    room_utils = types.SimpleNamespace(generate_room=lambda **kw: calls.append(kw))
    monkeypatch.setattr(bench, "import_gym_sokoban",
                        lambda: (room_utils, types.SimpleNamespace(SokobanEnv=_FakeSokobanEnv)))
    bench.main(["--batch", "4", "--steps", "2", "--levels", "2", "--baseline-steps", "10", "--repeats", "3"])
    out = capsys.readouterr().out
    assert "medians of 3" in out and "1-minute load average" in out and "during the timed calls" in out
    assert "above 1: ours faster" in out
    assert len(calls) == 3 * 2  # the baseline's generation ran once per repeat
