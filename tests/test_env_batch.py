"""EnvBatch implementations and the io_callback bridge: multi-action turns, errors, timeouts, jit."""

import re
import threading
import time

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from envs.batch import HostEnvBatch, JaxEnvBatch, make_env_batch
from envs.bridge import HostEnvBridge
from envs.protocols import HostEnv, JaxEnv
from envs.sokoban import Sokoban


class CounterEnv(HostEnv):
    """Counts up; "stop" ends the episode; optional crash or hang on a given step."""

    action_lookup = {"inc": 0, "stop": 1}
    action_names = ["Inc", "Stop"]

    def __init__(self, crash_at: int = -1, hang_at: int = -1, timeout: float = 0.5):
        self.crash_at, self.hang_at, self.step_timeout_s = crash_at, hang_at, timeout
        self.count = 0

    def instruction(self) -> str:
        return "Count."

    def reset(self, seed):
        self.count = seed
        return f"count={self.count}", {}

    def step(self, action):
        if self.count == self.crash_at:
            raise ValueError("boom")
        if self.count == self.hang_at:
            time.sleep(30)
        if action == "Stop":
            return "stopped", 1.0, True, False, {"success": True}
        self.count += 1
        return f"count={self.count}", 0.5, False, False, {"action_is_effective": True}


@pytest.mark.slow  # default run: too long for CI's 15 minutes on 2 cores
def test_jax_batch_turn_stops_at_first_done_and_sums_rewards():
    env = Sokoban(bank_size=1, use_cache=False)
    batch = JaxEnvBatch(env, 3)
    batch.reset([0, 0, 1])
    state0 = jax.tree.map(lambda x: x[0], batch.state)
    plan = env.oracle_actions(state0)
    extra = [0, 1, 2]
    result = batch.step([plan + extra, [], plan[:1]], np.array([True, True, False]))
    assert result.actions_executed.tolist() == [len(plan), 0, 0]
    assert result.terminated.tolist() == [True, False, False] and result.success[0]
    expected = -0.1 * len(plan) + 11.0
    assert result.rewards[0] == pytest.approx(expected, abs=1e-4)
    assert result.rewards[1] == 0.0 and result.observations[2] == ""
    # an episode without actions is unchanged; an inactive one too
    fresh = JaxEnvBatch(env, 3)
    fresh.reset([0, 0, 1])
    np.testing.assert_array_equal(batch.state.room[1], fresh.state.room[1])
    np.testing.assert_array_equal(batch.state.room[2], fresh.state.room[2])
    assert not np.array_equal(batch.state.room[0], fresh.state.room[0])
    # a finished episode is never stepped again
    again = batch.step([[0], [], []], np.array([True, False, False]))
    assert again.actions_executed[0] == 0 and again.rewards[0] == 0.0


def test_jax_batch_matches_single_episode_play():
    batch = make_env_batch("SimpleSokoban", 4, use_cache=False, bank_size=1)
    obs = batch.reset([5, 6, 7, 8])
    env = batch.env
    rng = np.random.default_rng(0)
    actions = [list(rng.integers(0, 4, 5)) for _ in range(4)]
    result = batch.step(actions, np.ones(4, bool))
    singles = env.reset_from_seeds([5, 6, 7, 8])
    step = jax.jit(env.step_env)
    for i in range(4):
        state = jax.tree.map(lambda x: x[i], singles)
        assert env.render_text(state) == obs[i]
        total = 0.0
        for a in actions[i]:
            _, state, r, t, _ = step(jax.random.PRNGKey(0), state, jnp.int32(a), env.default_params)
            total += float(r)
            if bool(t):
                break
        assert result.rewards[i] == pytest.approx(total, abs=1e-5)
        assert result.observations[i] == env.render_text(state)


@pytest.mark.slow  # default run: too long for CI's 15 minutes on 2 cores
def test_jax_batch_truncates_at_step_cap():
    batch = make_env_batch("SimpleSokoban", 1, use_cache=False, bank_size=1, max_steps=6)
    batch.reset([0])
    state = jax.tree.map(lambda x: x[0], batch.state)
    wall = next(a for a in range(4) if not bool(batch.env.step_env(
        jax.random.PRNGKey(0), state, a, batch.params)[4]["action_is_effective"]))
    result = batch.step([[wall] * 8], np.ones(1, bool))
    assert result.truncated[0] and not result.terminated[0] and result.actions_executed[0] == 6


def test_jax_batch_rejects_unparsed_actions():
    batch = make_env_batch("FrozenLake", 2)
    batch.reset([1, 2])
    with pytest.raises(TypeError, match="action_lookup"):
        batch.step([["Left"], []], np.ones(2, bool))


def test_host_batch_isolates_a_crashing_and_a_hanging_env():
    envs = [CounterEnv(), CounterEnv(crash_at=0), CounterEnv(hang_at=0, timeout=0.3)]
    batch = HostEnvBatch(envs)
    assert batch.reset([1, 0, 0]) == ["count=1", "count=0", "count=0"]
    start = time.monotonic()
    result = batch.step([[0, 0, 1], [0], [0]], np.ones(3, bool))
    assert time.monotonic() - start < 5
    assert result.rewards[0] == pytest.approx(2.0) and result.actions_executed[0] == 3
    assert result.terminated.tolist() == [True, True, True] and result.success[0]
    assert "ValueError: boom" in result.errors[1] and result.infos[1]["error"] == result.errors[1]
    assert result.errors[2].startswith("TimeoutError") and result.errors[0] == ""
    # finished episodes are not stepped again
    later = batch.step([[0], [0], [0]], np.ones(3, bool))
    assert later.actions_executed.tolist() == [0, 0, 0]


def test_bridge_steps_host_envs_inside_jit():
    bridge = HostEnvBridge(HostEnvBatch([CounterEnv(), CounterEnv(crash_at=3)]))

    @jax.jit
    def reset_and_step(seeds, handle, active):
        obs_handle, failed = bridge.reset(seeds)
        out = bridge.step(handle, active)
        return obs_handle, failed, out

    handle = bridge.put_actions([["inc", "inc"], ["inc"]])
    obs_handle, failed, out = reset_and_step(jnp.array([0, 3], jnp.int32), handle, jnp.array([True, True]))
    assert bridge.observations(obs_handle) == ["count=0", "count=3"]
    assert not np.asarray(failed).any()
    np.testing.assert_allclose(np.asarray(out["rewards"]), [1.0, 0.0])
    assert np.asarray(out["error"]).tolist() == [False, True]
    assert np.asarray(out["terminated"]).tolist() == [False, True]
    assert bridge.observations(out["obs_handle"])[0] == "count=2"
    with pytest.raises(KeyError):
        bridge.observations(out["obs_handle"])


class CoinEnv(JaxEnv):
    """Every step pays a fresh uniform draw from its key: shows where a batch's randomness comes from."""

    action_lookup = {"flip": 0}

    @property
    def default_params(self):
        return None

    def reset_env(self, key, params):
        return jnp.zeros(()), jnp.zeros((), jnp.int32)

    def step_env(self, key, state, action, params):
        info = {"action_is_effective": jnp.bool_(True), "success": jnp.bool_(False)}
        return jnp.zeros(()), state + 1, jax.random.uniform(key), jnp.bool_(False), info

    def is_truncated(self, state, params):
        return jnp.bool_(False)

    @property
    def action_names(self):
        return ["Flip"]

    def instruction(self):
        return "Flip."

    def render_text(self, state, params=None):
        return f"flips={int(state)}"


def _coin_draws(seeds, turns=3, instances=None):
    batch = JaxEnvBatch(CoinEnv(), len(seeds))
    batch.reset(seeds, instances)
    return np.stack([batch.step([[0, 0]] * len(seeds), np.ones(len(seeds), bool)).rewards for _ in range(turns)], 1)


def test_transition_randomness_comes_from_the_episode_seed():
    seeds = list(range(50))
    draws = _coin_draws(seeds)
    assert len({row.tobytes() for row in draws}) == 50  # a row's draws depend on its seed, not its position
    np.testing.assert_array_equal(_coin_draws(seeds), draws)  # same seeds, same draws
    np.testing.assert_array_equal(_coin_draws(seeds[::-1]), draws[::-1])  # whatever the row
    other_step = _coin_draws(list(range(1000, 1050)))  # the next training step's seeds
    assert np.abs(np.corrcoef(draws.ravel(), other_step.ravel())[0, 1]) < 0.3
    assert np.mean(draws) == pytest.approx(1.0, abs=0.15)  # two uniform draws per turn
    # a turn's second action draws anew (steps are counted across turns, not per turn)
    one = JaxEnvBatch(CoinEnv(), 1)
    one.reset([7])
    split = [one.step([[0]], np.ones(1, bool)).rewards[0] for _ in range(2)]
    assert sum(split) == pytest.approx(_coin_draws([7], turns=1)[0, 0], abs=1e-6)


class SlowOnceEnv(CounterEnv):
    """Hangs on its first reset only when it is the first instance built; later instances are healthy."""

    built = 0

    def __init__(self):
        super().__init__(timeout=2.0)
        self.instance = SlowOnceEnv.built
        SlowOnceEnv.built += 1
        self.closed = threading.Event()
        self.resets = 0

    def reset(self, seed):
        self.resets += 1
        if self.instance == 0:
            time.sleep(30)
        return super().reset(seed)

    def close(self):
        self.closed.set()


def test_a_timed_out_env_is_replaced_at_the_next_reset():
    SlowOnceEnv.built = 0
    batch = HostEnvBatch([SlowOnceEnv(), SlowOnceEnv()], factory=SlowOnceEnv)
    stuck = batch.envs[0]
    batch.reset([1, 2])
    assert batch.reset_errors[0].startswith("TimeoutError") and batch.reset_errors[1] == ""
    start = time.monotonic()
    assert batch.reset([3, 4]) == ["count=3", "count=4"]  # a fresh env in the slot: nothing waits on the stuck one
    assert time.monotonic() - start < 1.8  # the stuck env would cost its whole 2 s timeout again
    assert batch.reset_errors == ["", ""] and batch.replaced == 1 and batch.envs[0] is not stuck
    assert stuck.resets == 1  # never called again
    assert stuck.closed.wait(5.0)  # the stuck instance is closed in the background
    result = batch.step([[0], [0]], np.ones(2, bool))
    assert result.errors == ["", ""] and result.rewards.tolist() == [0.5, 0.5]


def test_a_failing_replacement_fails_the_slots_episodes_and_is_retried():
    """The env server stalls, then is down: rebuilding the timed-out env raises. That fails only the slot's
    episodes (the reason recorded), never the reset of the others; the next reset tries the factory again."""
    server_up = [False]

    def factory():
        if not server_up[0]:
            raise ConnectionError("env server unreachable")
        return CounterEnv()

    batch = HostEnvBatch([CounterEnv(hang_at=0, timeout=0.3), CounterEnv()], factory=factory)
    batch.reset([0, 1])
    assert batch.step([[0], [0]], np.ones(2, bool)).errors[0].startswith("TimeoutError")
    assert batch.reset([2, 3]) == ["", "count=3"]  # no exception out of reset
    assert "ConnectionError: env server unreachable" in batch.reset_errors[0] and batch.reset_errors[1] == ""
    result = batch.step([[0], [0]], np.ones(2, bool))
    assert "env server unreachable" in result.errors[0] and result.terminated[0] and result.errors[1] == ""
    server_up[0] = True
    assert batch.reset([4, 5]) == ["count=4", "count=5"] and batch.reset_errors == ["", ""] and batch.replaced == 1


class MalformedEnv(CounterEnv):
    """Returns what a careless env might: a bare string from reset, or a non-text observation from step."""

    def __init__(self, bad_reset=False, bad_step=None):
        super().__init__()
        self.bad_reset, self.bad_step = bad_reset, bad_step

    def reset(self, seed):
        text, info = super().reset(seed)
        return text if self.bad_reset else (text, info)

    def step(self, action):
        out = super().step(action)
        return (self.bad_step, *out[1:]) if self.bad_step is not None else out


def test_malformed_env_results_fail_their_episode_with_what_was_returned():
    batch = HostEnvBatch([MalformedEnv(), MalformedEnv(bad_reset=True), MalformedEnv(bad_step={"grid": [1]})])
    assert batch.reset([1, 2, 3]) == ["count=1", "", "count=3"]  # never "c", the bare string's first character
    assert "must return (observation: str, info: dict), got str 'count=2'" in batch.reset_errors[1]
    result = batch.step([[0], [0], [0]], np.ones(3, bool))
    assert result.errors[0] == "" and result.observations[0] == "count=2"
    assert "must return (observation: str" in result.errors[1] and result.terminated[1]
    assert "observation dict {'grid': [1]}, not a str" in result.errors[2]  # the field, and what it held
    assert result.terminated[2] and result.observations[2] == ""


class FieldEnv(CounterEnv):
    """Returns `fields` (reward, terminated, truncated, info) from step, as a careless env might."""

    def __init__(self, *fields):
        super().__init__()
        self.fields = fields

    def step(self, action):
        return ("ok", *self.fields)


@pytest.mark.parametrize("fields, needle", [
    ((None, True, False, {}), "reward NoneType None, not a number"),
    (("1.0", True, False, {}), "reward str '1.0', not a number"),
    ((np.array([0.5, 0.5]), True, False, {}), "reward ndarray array([0.5, 0.5]), not a number"),
    ((1.0, "False", False, {}), "terminated str 'False', not a bool"),
    ((1.0, True, None, {}), "truncated NoneType None, not a bool"),
    ((1.0, True, False, [("success", True)]), "info list [('success', True)], not a dict"),
    ((1.0, True, False, {"success": "False"}),
     "FieldEnv.step(action) returned info['success'] str 'False', not a bool"),
    ((1.0, False, False, {"action_is_valid": "false"}), "info['action_is_valid'] str 'false', not a bool"),
    ((1.0, False, False, {"action_is_effective": None}), "info['action_is_effective'] NoneType None, not a bool"),
    ((1.0, False, False, {"action_in_lookup": 2}), "info['action_in_lookup'] int 2, not a bool"),
])
def test_a_step_result_of_the_wrong_types_fails_its_episode_naming_the_field(fields, needle):
    """Never a reward read from a string, an episode ended by the truthy string "False", nor float()'s message."""
    batch = HostEnvBatch([FieldEnv(*fields), FieldEnv(np.float32(0.5), np.bool_(True), 0, None),
                          FieldEnv(jnp.float32(1.0), jnp.bool_(False), False, {"success": True})])
    batch.reset([0, 1, 2])
    result = batch.step([[0], [0], [0]], np.ones(3, bool))
    assert needle in result.errors[0] and "it must return (observation: str, reward: float" in result.errors[0]
    assert result.terminated[0] and result.rewards[0] == 0.0
    assert result.errors[1:] == ["", ""] and result.rewards[1:].tolist() == [0.5, 1.0]  # numpy and JAX scalars pass
    assert result.terminated.tolist() == [True, True, False]


@pytest.mark.parametrize("flag, success", [(True, True), (np.bool_(False), False), (jnp.bool_(True), True),
                                           (1, True), (0.0, False), (np.int64(1), True)])
def test_info_flags_read_as_bools_numpy_bools_and_0_1_numbers(flag, success):
    """The info flags the metrics read take any bool or a 0/1 number; `success` is read as its value (a string
    "False" is refused above, never read as a success)."""
    batch = HostEnvBatch([FieldEnv(1.0, True, False, {"success": flag, "action_is_effective": flag})])
    batch.reset([0])
    result = batch.step([[0]], np.ones(1, bool))
    assert result.errors == [""] and result.success.tolist() == [success]
    assert result.action_is_effective.tolist() == [success]


class ObservationEnv(CounterEnv):
    """Returns `observation` (not a str) in an otherwise well-formed step result."""

    def __init__(self, observation):
        super().__init__()
        self.observation = observation

    def step(self, action):
        return (self.observation, *super().step(action)[1:])


@pytest.mark.parametrize("observation, needle", [(None, "observation NoneType None, not a str"),
                                                 (b"ok", "observation bytes b'ok', not a str")])
def test_a_step_result_whose_observation_is_not_text_fails_its_episode_naming_the_field(observation, needle):
    """A 5-tuple with a None observation: the error names the observation, not only the whole tuple."""
    batch = HostEnvBatch([ObservationEnv(observation), CounterEnv()])
    batch.reset([0, 1])
    result = batch.step([[0], [0]], np.ones(2, bool))
    assert needle in result.errors[0] and "it must return (observation: str, reward: float" in result.errors[0]
    assert result.terminated[0] and result.observations[0] == "" and result.errors[1] == ""


def test_make_env_batch_gives_host_batches_a_factory():
    batch = make_env_batch("Countdown", 2)
    assert batch.factory is not None and type(batch.factory()) is type(batch.envs[0])


def test_an_unregistered_env_name_suggests_the_close_one_and_says_how_a_name_gets_registered():
    """The newcomer's two mistakes: a misspelled name, and a name whose registering module was never imported."""
    from envs.registry import get_spec

    with pytest.raises(KeyError) as info:
        get_spec("SimpleSokobn")
    message = info.value.args[0]
    assert "Unknown environment 'SimpleSokobn'" in message and "did you mean 'SimpleSokoban'?" in message, message
    with pytest.raises(KeyError) as info:
        get_spec("MyGuessNumber")
    message = info.value.args[0]
    assert "did you mean" not in message and "envs.register" in message and "import" in message, message
    assert "my_pkg.envs:MyEnv" in message, message


class RaisesTimeoutEnv(CounterEnv):
    """An env whose own network call timed out: it raises TimeoutError (socket.timeout) or a library's
    ReadTimeout at once; it is not stuck."""

    def __init__(self, exc: BaseException):
        super().__init__()
        self.exc, self.raised = exc, 0

    def reset(self, seed):
        if seed == 7:
            self.raised += 1
            raise self.exc
        return super().reset(seed)

    def step(self, action):
        if self.count == 0:
            self.raised += 1
            raise self.exc
        return super().step(action)


class ReadTimeout(OSError):
    pass


@pytest.mark.parametrize("exc", [TimeoutError("timed out"), ReadTimeout("read timed out")])
def test_an_env_that_raises_a_timeout_error_is_not_abandoned(exc):
    """Only the batch's own timeout (the env still running) abandons a slot; an env that raised TimeoutError fails
    that episode alone, and the slot's next episode runs on it (there is no factory to replace it here)."""
    env = RaisesTimeoutEnv(exc)
    batch = HostEnvBatch([env, CounterEnv()])
    batch.reset([0, 0])
    result = batch.step([[0], [0]], np.ones(2, bool))
    assert type(exc).__name__ in result.errors[0] and result.terminated[0] and result.errors[1] == ""
    assert batch.reset([7, 0])[0] == "" and type(exc).__name__ in batch.reset_errors[0]
    assert batch.reset([1, 0]) == ["count=1", "count=0"] and batch.reset_errors == ["", ""]
    result = batch.step([[0], [0]], np.ones(2, bool))
    assert result.errors == ["", ""] and result.observations[0] == "count=2" and env.raised == 2


def test_a_failing_replacement_is_tried_once_per_reset_not_once_per_slot():
    """The env server hangs: every build of a replacement waits its whole timeout (here 0.2 s). Building the B
    slots' envs one after another would stall each reset for B timeouts (128 x 30 s for a RemoteEnv)."""
    builds = []

    def factory():
        builds.append(1)
        time.sleep(0.2)
        raise ConnectionError("env server does not answer /spec")

    batch = HostEnvBatch([CounterEnv(hang_at=0, timeout=0.3) for _ in range(6)], factory=factory)
    batch.reset([0] * 6)
    assert all(e.startswith("TimeoutError") for e in batch.step([[0]] * 6, np.ones(6, bool)).errors)
    assert batch.reset([1] * 6) == [""] * 6 and len(builds) == 1
    assert all("env server does not answer /spec" in e and "retried at the next reset" in e for e in batch.reset_errors)
    batch.reset([2] * 6)
    assert len(builds) == 2  # tried again, once, at the next reset


class _GoStayEnv(CoinEnv):
    """"Go" moves (an effective action), "Stay" does not."""

    action_lookup = {"go": 0, "stay": 1}

    def step_env(self, key, state, action, params):
        info = {"action_is_effective": action == 0, "success": jnp.bool_(False)}
        return jnp.zeros(()), state + (action == 0), jnp.float32(0.0), jnp.bool_(False), info

    @property
    def action_names(self):
        return ["Go", "Stay"]


class _GoStayHostEnv(HostEnv):
    action_lookup = {"go": 0, "stay": 1}
    action_names = ["Go", "Stay"]

    def instruction(self):
        return "Go or stay."

    def reset(self, seed):
        return "at=0", {}

    def step(self, action):
        return "at", 0.0, False, False, {"action_is_effective": action == "Go"}


def test_a_turns_effectiveness_is_its_last_executed_actions_as_in_ragen():
    """RAGEN keeps the last action's info for a multi-action turn (es_manager: "use last info for multi-action"),
    so [Go, Stay] is not effective and [Stay, Go] is. Before, a turn was effective when any of its actions was."""
    turns = [[0, 1], [1, 0], [0, 0], [1, 1]]
    jax_batch = JaxEnvBatch(_GoStayEnv(), 4)
    jax_batch.reset([0, 1, 2, 3])
    host_batch = HostEnvBatch([_GoStayHostEnv() for _ in range(4)])
    host_batch.reset([0, 1, 2, 3])
    for batch, actions in ((jax_batch, turns), (host_batch, [[["Go", "Stay"][a] for a in t] for t in turns])):
        result = batch.step(actions, np.ones(4, bool))
        assert result.action_is_effective.tolist() == [False, True, True, False]
        assert result.actions_executed.tolist() == [2, 2, 2, 2]


@pytest.mark.parametrize("lookup, names, needle", [
    ({"up": 1, "down": 2}, ["Up", "Down"], r"ids \[1, 2\]; they must be 0..1"),
    ({"up": 0, "down": 1}, ["Down", "Up"], r"'Down' at position 0 has id 1; 'Up' at position 1 has id 0"),
    ({"up": 0, "down": 1}, ["Up"], r"\(1 names for 2 ids\)"),
])
def test_a_host_env_whose_names_do_not_follow_its_lookup_is_refused(lookup, names, needle):
    """Before: a 1-based lookup (as RAGEN's envs number actions) sent "Down" when the model answered "Up", and the
    last action failed its episode with an IndexError."""
    env = _GoStayHostEnv()
    env.action_lookup, env.action_names = lookup, names
    with pytest.raises(ValueError, match=needle):
        HostEnvBatch([env])


def test_aliases_without_display_names_reach_step_as_their_ids_first_name():
    env = _GoStayHostEnv()
    env.action_lookup, env.action_names = {"go": 0, "walk": 0, "stay": 1}, None
    batch = HostEnvBatch([env])
    assert batch.action_names == ["go", "stay"]  # before: ["go", "walk", "stay"], so id 1 sent "walk"


def _write_module(tmp_path, monkeypatch, name: str, text: str) -> None:
    (tmp_path / f"{name}.py").write_text(text)
    monkeypatch.syspath_prepend(str(tmp_path))


@pytest.mark.parametrize("text, needle", [
    ("raise RuntimeError('no data yet')\n", "raised RuntimeError: no data yet"),
    ("def broken(:\n    pass\n", "raised SyntaxError"),
])
def test_an_env_module_whose_code_fails_at_import_is_a_clear_config_error(tmp_path, monkeypatch, text, needle):
    """A custom env given by import path whose module raises (not a missing module): config validation reports it
    in one line, naming the module, the error, where it was raised and the fix, instead of a bare traceback."""
    from configs.bandit import get_config
    from ragen_jax.config import validate_config

    name = f"faulty_env_{len(text)}"
    _write_module(tmp_path, monkeypatch, name, text)
    cfg = get_config("tiny")
    cfg.env.name, cfg.warmstart.enabled = f"{name}:MyEnv", False
    with pytest.raises(ValueError) as info:
        validate_config(cfg)
    message = str(info.value)
    for part in (f"Environment '{name}:MyEnv'", f"importing module '{name}'", needle, f"{name}.py:",
                 "Fix that module"):
        assert part in message, message


def test_an_env_module_missing_a_dependency_names_the_dependency_not_the_path(tmp_path, monkeypatch):
    from envs.registry import get_spec

    _write_module(tmp_path, monkeypatch, "needs_dep_env", "import not_installed_dep_xyz\n")
    with pytest.raises(KeyError) as info:
        get_spec("needs_dep_env:MyEnv")
    message = info.value.args[0]
    assert "imports 'not_installed_dep_xyz', which is not installed" in message and "PYTHONPATH" not in message


class _CtorFails(HostEnv):
    ERROR: Exception = RuntimeError("no data yet")

    def __init__(self):
        raise _CtorFails.ERROR

    def instruction(self):
        return ""

    def reset(self, seed):
        return "", {}

    def step(self, action):
        return "", 0.0, True, False, {}


class _NeedsPath(_CtorFails):
    def __init__(self, path):
        self.path = path


@pytest.mark.parametrize("cls, error, needles", [
    (_CtorFails, RuntimeError("no data yet"),
     ["its constructor raised RuntimeError: no data yet", "Fix the env's code"]),
    (_CtorFails, FileNotFoundError(2, "No such file or directory", "/data/x.jsonl"),
     ["FileNotFoundError", "/data/x.jsonl", "--config.env.kwargs.*"]),
    (_NeedsPath, None, ["missing 1 required positional argument: 'path'", "--config.env.kwargs.*"]),
])
def test_an_env_whose_constructor_raises_is_a_setup_error_naming_the_env_and_the_fix(cls, error, needles):
    """Any constructor failure is an EnvSetupError (run.py prints it as one FATAL line), naming the env, the error,
    where it was raised and what to change; a RuntimeError, an OSError or a missing argument was a traceback or a
    bare OSError without the env's name."""
    from envs.batch import EnvSetupError
    from envs.registry import EnvSpec

    _CtorFails.ERROR = error
    with pytest.raises(EnvSetupError) as info:
        make_env_batch(EnvSpec(name="MyEnv", factory=cls, kind="host"), 2)
    message = str(info.value)
    assert message.startswith("env MyEnv could not be built") and "raised at" in message, message
    for needle in needles:
        assert needle in message, message


def test_a_registered_factory_whose_module_fails_at_import_is_a_setup_error(tmp_path, monkeypatch):
    from envs.batch import EnvSetupError
    from envs.registry import EnvSpec

    _write_module(tmp_path, monkeypatch, "faulty_registered_env", "x = 1 / 0\n")
    with pytest.raises(EnvSetupError, match=r"importing module 'faulty_registered_env' raised ZeroDivisionError"):
        make_env_batch(EnvSpec(name="MyEnv", factory="faulty_registered_env:MyEnv", kind="host"), 2)
    _write_module(tmp_path, monkeypatch, "fine_registered_env", "y = 1\n")
    with pytest.raises(EnvSetupError, match=r"module 'fine_registered_env' has no 'MyEnv'"):
        make_env_batch(EnvSpec(name="MyEnv", factory="fine_registered_env:MyEnv", kind="host"), 2)


class _SilentCoin(CoinEnv):
    """CoinEnv whose renderer returns None (no text) after the first flip."""

    def render_text(self, state, params=None):
        return None if int(state) >= 1 else "flips=0"


def test_a_jax_env_renderer_returning_no_text_fails_the_episode_naming_the_contract():
    batch = JaxEnvBatch(_SilentCoin(), 2)
    assert batch.reset([0, 1]) == ["flips=0", "flips=0"] and batch.reset_errors == ["", ""]
    result = batch.step([[0], []], np.array([True, False]))
    assert "render_text returned NoneType None, not a str" in result.errors[0] and result.errors[1] == ""
    assert result.terminated.tolist() == [True, False] and result.observations == ["", ""]
    assert result.infos[0]["error"] == result.errors[0]


class _NoStep(HostEnv):
    def instruction(self):
        return ""

    def reset(self, seed):
        return "", {}


class _NoRender(CoinEnv):
    render_text = JaxEnv.render_text


def test_an_env_class_missing_a_method_is_refused_naming_the_method(tmp_path, monkeypatch):
    """A custom env that leaves out a method the protocol needs stops the run naming that method, both as an
    import path (the config check) and registered (building the batch); it was a TypeError blamed on the env's
    kwargs (HostEnv) or every episode failing with NotImplementedError mid-rollout (JaxEnv)."""
    from envs.batch import EnvSetupError
    from envs.registry import EnvSpec, get_spec

    for cls, needle in [(_NoStep, "does not define def step(self, action: str). A HostEnv needs them all"),
                        (_NoRender, "does not define def render_text(self, state, params=None) -> str. A JaxEnv")]:
        kind = "jax" if issubclass(cls, JaxEnv) else "host"
        with pytest.raises(EnvSetupError, match=re.escape(needle)):
            make_env_batch(EnvSpec(name="MyEnv", factory=cls, kind=kind), 2)
    _write_module(tmp_path, monkeypatch, "half_done_env", "from envs.protocols import HostEnv\n\n"
                  "class MyEnv(HostEnv):\n    def reset(self, seed):\n        return '', {}\n")
    with pytest.raises(KeyError) as info:
        get_spec("half_done_env:MyEnv")
    message = info.value.args[0]
    assert "half_done_env.MyEnv does not define def instruction(self) -> str; def step(self, action: str)" in message
    with pytest.raises(KeyError, match="module 'half_done_env' .* has no 'Other'; define that class there"):
        get_spec("half_done_env:Other")


class _NoSuccessInfo(CoinEnv):
    def step_env(self, key, state, action, params):
        return jnp.zeros(()), state + 1, jnp.float32(0), jnp.bool_(False), {"action_is_effective": jnp.bool_(True)}


def test_a_jax_env_whose_info_lacks_success_names_the_key_and_the_contract():
    """A step_env info without `success` was a bare KeyError('success') from inside the jitted turn, a traceback
    after the model was built; now building the batch refuses it (run.py: one FATAL line before any model work)."""
    from envs.batch import EnvSetupError
    from envs.registry import EnvSpec

    needle = (r"_NoSuccessInfo.step_env returned an info without 'success' \(its keys: \['action_is_effective'\]\); "
              r"a JaxEnv's step_env info must hold")
    with pytest.raises(EnvSetupError, match=needle):
        make_env_batch(EnvSpec(name="MyEnv", factory=_NoSuccessInfo, kind="jax"), 2)


def test_a_one_based_lookup_is_blamed_on_the_env_class_not_its_kwargs():
    """make_env_batch reported a 1-based action_lookup as 'could not be built from its kwargs (--config.env.kwargs.*)',
    sending the reader to settings that cannot fix it."""
    from envs.batch import EnvSetupError
    from envs.registry import EnvSpec

    class OneBased(_GoStayHostEnv):
        action_lookup, action_names = {"go": 1, "stay": 2}, ["Go", "Stay"]

    with pytest.raises(EnvSetupError) as info:
        make_env_batch(EnvSpec(name="MyEnv", factory=OneBased, kind="host"), 2)
    assert str(info.value).startswith("OneBased.action_lookup has ids [1, 2]; they must be 0..1"), str(info.value)
