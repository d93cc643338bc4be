"""experiments/bench/bench_envs.py: every measurement repeated and interleaved, the load printed, the ratios labelled,
and both sides' steps checked to agree on the same levels and actions."""

import re
import types

import jax.numpy as jnp
import numpy as np
import pytest

from envs.sokoban.env import _state_from_level, step_level
from experiments.bench import bench_envs as bench


class _FakeSokobanEnv:
    """gym-sokoban's SokobanEnv surface that the bench uses (the package is not installed here), stepping with
    our rules; `reward_bias` makes it disagree."""

    reward_bias = 0.0

    def __init__(self, dim_room, num_boxes, max_steps, reset):
        self.max_steps, self.steps = max_steps, 0

    def step(self, action, observation_mode):
        self.steps += 1
        state = _state_from_level(jnp.asarray(self.room_fixed), jnp.asarray(self.room_state), jnp.int32(-1))
        new, reward, _ = step_level(state, jnp.int32(action - 1))  # gym's push ids are ours + 1
        self.room_state = np.asarray(new.room).astype(int)
        self.num_env_steps += 1
        done = bool(new.solved) or self.num_env_steps >= self.max_steps
        return None, float(reward) + self.reward_bias, done, {}


def _run(monkeypatch, env_class):
    calls = []
    room_utils = types.SimpleNamespace(generate_room=lambda **kw: calls.append(kw))
    monkeypatch.setattr(bench, "import_gym_sokoban",
                        lambda: (room_utils, types.SimpleNamespace(SokobanEnv=env_class)))
    bench.main(["--batch", "4", "--steps", "6", "--levels", "2", "--baseline-episodes", "2", "--repeats", "3"])
    return calls


def test_smallest_setting_prints_medians_load_and_labelled_ratios(monkeypatch, capsys):
    calls = _run(monkeypatch, _FakeSokobanEnv)
    out = capsys.readouterr().out
    assert "medians of 3" in out and "1-minute load average" in out and "during the timed calls" in out
    assert "above 1: ours faster" in out
    assert len(calls) == 3 * 2  # the baseline's generation ran once per repeat
    assert re.search(r"same results: yes \(2 episodes, \d+ steps compared", out), out


def test_sides_that_disagree_on_the_same_levels_and_actions_exit_1(monkeypatch, capsys):
    class Off(_FakeSokobanEnv):
        reward_bias = 0.5

    with pytest.raises(SystemExit, match=r"disagree .* first: gym step: episode 0: return") as stop:
        _run(monkeypatch, Off)
    assert stop.value.code != 0
    assert "same results: no" in capsys.readouterr().out


def test_step_mismatches_names_steps_returns_and_rooms():
    rooms = np.zeros((3, 2, 2), np.int8)
    ours = dict(lengths=np.array([5, 5, 5]), returns=np.array([1.0, 1.0, 1.0]), rooms=rooms)
    other_rooms = rooms.copy()
    other_rooms[2, 0, 0] = 1
    theirs = dict(lengths=np.array([4, 5, 5]), returns=np.array([1.0, 1.5, 1.0]), rooms=other_rooms)
    assert bench.step_mismatches(ours, theirs) == [
        "episode 0: 5 steps (ours) vs 4 (gym-sokoban)", "episode 1: return 1.0000 (ours) vs 1.5000",
        "episode 2: the final rooms differ"]
    assert bench.step_mismatches(ours, {k: v[:2] for k, v in ours.items()}) == []
