"""OpenEnv both ways, on loopback: our host envs served as OpenEnv environments (OpenEnv's own server) and played
through OpenEnv's own client (`openenv:URL` env names) give what the in-process env gives for the same seeds; any
OpenEnv environment trains by URL; a server that is gone, answers garbage or stalls fails that episode, never the
batch."""

from __future__ import annotations

import http.client
import json
import time

import numpy as np
import pytest
from openenv.core.env_server import Action, Environment, Observation, State, create_fastapi_app
from starlette.applications import Starlette
from starlette.responses import JSONResponse
from starlette.routing import Route, WebSocketRoute

from envs.batch import EnvSetupError, make_env_batch
from envs.openenv.client import OpenEnvError, OpenEnvHostEnv
from envs.openenv.server import openenv_app
from envs.registry import get_spec
from envs.serve.asgi import AsgiServer

COUNTER = "envs.serve.toy:CounterEnv"


@pytest.fixture
def serve():
    """serve(app) -> its URL on 127.0.0.1; every server is stopped after the test."""
    servers = []

    def start(app) -> str:
        servers.append(AsgiServer(app).start())
        return servers[-1].url

    yield start
    for server in servers:
        server.stop()


def _play(batch, seeds, turns):
    """Reset with `seeds`, then play `turns` (one action per episode per turn) -> every observable result."""
    seen = [batch.reset(seeds), batch.instruction(), batch.legend(), batch.action_lookup, batch.action_names]
    for actions in turns:
        res = batch.step([[a] for a in actions], np.ones(len(seeds), bool))
        seen.append((res.observations, res.rewards.tolist(), res.terminated.tolist(), res.truncated.tolist(),
                     res.success.tolist(), res.errors, res.infos))
    return seen


@pytest.mark.parametrize("env,kwargs,turns", [
    (COUNTER, {"max_steps": 3, "target": 6}, [["up", "down", "Up"], ["up", "bogus", "up"], ["up", "up", "down"]]),
    ("SimpleSudoku", {}, [["(1,1,5)", "place 3 at 2,2", "(9,9,1)"], ["(1,2,3)", "(4,4,4)", "nonsense"]]),
])
def test_our_env_over_openenv_plays_as_the_in_process_env(serve, env, kwargs, turns):
    url = serve(openenv_app(env, kwargs, max_sessions=8))
    seeds = [3, 4, 11]
    remote = make_env_batch(f"openenv:{url}", len(seeds))
    local = make_env_batch(env, len(seeds), **kwargs)
    try:
        assert _play(remote, seeds, turns) == _play(local, seeds, turns)
        assert _play(remote, seeds[::-1], turns[:1]) == _play(local, seeds[::-1], turns[:1])  # sessions reused
    finally:
        remote.close()
        local.close()


class EchoAction(Action):
    message: str


class EchoObservation(Observation):
    echoed: str = ""
    length: int = 0


class EchoEnvironment(Environment[EchoAction, EchoObservation, State]):
    """Any OpenEnv environment (not ours): echoes the message, reward its length, done after 2 steps."""

    SUPPORTS_CONCURRENT_SESSIONS = True

    def __init__(self):
        super().__init__()
        self._state = State()

    def reset(self, seed=None, episode_id=None, **kwargs):
        self._state = State(episode_id=episode_id, step_count=0)
        return EchoObservation(echoed=f"ready {seed}")

    def step(self, action, timeout_s=None, **kwargs):
        self._state.step_count += 1
        return EchoObservation(echoed=action.message, length=len(action.message), reward=len(action.message),
                               done=self._state.step_count >= 2, metadata={"success": action.message == "win"})

    @property
    def state(self):
        return self._state


def test_any_openenv_environment_trains_by_url(serve):
    url = serve(create_fastapi_app(EchoEnvironment, EchoAction, EchoObservation, max_concurrent_envs=4))
    spec = get_spec(f"openenv:{url}")
    assert (spec.kind, spec.kwargs) == ("host", {"url": url})
    batch = make_env_batch(spec, 2)
    try:
        assert batch.reset([5, 6]) == ["ready 5", "ready 6"]
        first = batch.step([["hello"], ["win"]], np.ones(2, bool))
        assert first.observations == ["hello", "win"] and first.rewards.tolist() == [5.0, 3.0]
        assert first.success.tolist() == [False, True] and not first.terminated.any()
        second = batch.step([["a"], ["bb"]], np.ones(2, bool))
        assert second.terminated.tolist() == [True, True] and second.truncated.tolist() == [False, False]
        assert second.errors == ["", ""]
    finally:
        batch.close()


def _fake_openenv(reply):
    """A server with OpenEnv's /schema and /metadata whose WebSocket answers every message with `reply`."""
    async def schema(_):
        return JSONResponse({"action": {"properties": {"text": {"type": "string"}}},
                             "observation": {"properties": {"text": {"type": "string"}}}, "state": {}})

    async def metadata(_):
        return JSONResponse({"name": "fake", "description": "A fake env."})

    async def ws(socket):
        await socket.accept()
        while True:
            await socket.receive_text()
            await socket.send_text(reply)

    return Starlette(routes=[Route("/schema", schema), Route("/metadata", metadata), WebSocketRoute("/ws", ws)])


@pytest.mark.parametrize("reply,needle", [
    ("not json", "JSONDecodeError"),
    (json.dumps({"type": "observation", "data": {"observation": {"other": 1}, "done": False}}), "without the text"),
    (json.dumps({"type": "observation", "data": {"observation": "text", "done": False}}), "not an object"),
    (json.dumps({"type": "error", "data": {"message": "env exploded", "code": "EXECUTION_ERROR"}}), "env exploded"),
])
def test_a_reply_that_is_no_observation_fails_only_that_episode(serve, reply, needle):
    batch = make_env_batch(f"openenv:{serve(_fake_openenv(reply))}", 2)
    try:
        assert batch.reset([1, 2]) == ["", ""] and needle in batch.reset_errors[0]
        res = batch.step([["x"], ["y"]], np.ones(2, bool))
        assert res.terminated.all() and all(needle in e and "OpenEnv reset" in e for e in res.errors)
    finally:
        batch.close()


def test_a_bad_step_reply_names_the_field(serve):
    reset = {"type": "observation", "data": {"observation": {"text": "hi"}, "done": False}}
    env = OpenEnvHostEnv(serve(_fake_openenv(json.dumps(reset))))
    assert env.reset(1) == ("hi", {})
    env.step("a")  # the reset reply read as a step: reward None is 0, not done
    for data, needle in [({"observation": {"text": "x"}, "done": "yes"}, "done 'yes', not a bool"),
                         ({"observation": {"text": "x"}, "reward": float("nan"), "done": True}, "non-finite")]:
        bad = OpenEnvHostEnv(serve(_fake_openenv(json.dumps({"type": "observation", "data": data}))))
        with pytest.raises(OpenEnvError, match=needle):
            bad.step("a")
        bad.close()
    env.close()


def test_a_server_gone_or_stalled_fails_the_episode_and_the_batch_goes_on(serve):
    server = AsgiServer(openenv_app(COUNTER, {"delay_s": 2.0}, max_sessions=4)).start()
    stalled = OpenEnvHostEnv(server.url, timeout_s=0.3)
    assert stalled.reset(1)[0] == "Value: 1"
    started = time.monotonic()
    with pytest.raises(OpenEnvError, match="no answer within the timeout"):
        stalled.step("up")
    assert time.monotonic() - started < 1.5
    stalled.close()
    batch = make_env_batch(f"openenv:{server.url}", 2)
    assert batch.reset([1, 2]) == ["Value: 1", "Value: 2"]
    server.stop()  # gone mid-episode
    res = batch.step([["up"], ["up"]], np.ones(2, bool))
    assert res.terminated.all() and all("OpenEnv step" in e for e in res.errors)
    assert batch.reset([3, 4]) == ["", ""] and all("OpenEnv reset" in e for e in batch.reset_errors)
    batch.close()


def test_an_unreachable_or_misnamed_server_is_a_setup_error():
    with pytest.raises(EnvSetupError, match="No OpenEnv server answers at http://127.0.0.1:9"):
        make_env_batch("openenv:http://127.0.0.1:9", 1)
    with pytest.raises(KeyError, match="http:// URL after 'openenv:'"):
        get_spec("openenv:127.0.0.1:8000")


def test_an_action_schema_with_several_text_fields_needs_action_field(serve):
    class TwoFields(Action):
        message: str
        note: str = ""

    url = serve(create_fastapi_app(EchoEnvironment, TwoFields, EchoObservation))
    with pytest.raises(ValueError, match="2 string fields .message, note.*env.kwargs.action_field"):
        OpenEnvHostEnv(url)
    assert OpenEnvHostEnv(url, action_field="message").action_field == "message"


def _post(url: str, path: str, body: bytes) -> tuple[int, str]:
    conn = http.client.HTTPConnection(url.removeprefix("http://"), timeout=30)
    try:
        conn.request("POST", path, body=body, headers={"Content-Type": "application/json"})
        response = conn.getresponse()
        return response.status, response.read().decode()
    finally:
        conn.close()


@pytest.mark.parametrize("path,body,needle", [
    ("/reset", b'{"seed": ' + b"9" * 5000 + b"}", "5000 digits"),
    ("/reset", b'{"seed": 18446744073709551616}', "seed must be an integer in [0, 2**63)"),
    ("/reset", b'{"seed": -1}', "greater than or equal to 0"),
    ("/reset", b'{"seed": ', "JSON decode error"),
    ("/step", b'{"action": {"text": 5}}', "Bad action: text: Input should be a valid string"),
])
def test_bad_requests_to_our_openenv_server_are_400_with_the_reason(serve, path, body, needle):
    url = serve(openenv_app(COUNTER))
    status, text = _post(url, path, body)
    assert status == 400 and needle in text, text
    assert _post(url, "/reset", b'{"seed": 1}') == (200, _post(url, "/reset", b'{"seed": 1}')[1])


@pytest.mark.slow  # compiles the tiny model's rollout programs
def test_a_rollout_through_openenv_plays_the_trajectories_of_the_in_process_env(serve):
    import jax
    from flax import nnx

    from ragen_jax.models.tiny import make_tiny_model
    from ragen_jax.rollout import RolloutConfig, group_seeds
    from ragen_jax.rollout.continuous import ContinuousEngine

    model, tok = make_tiny_model(seed=3, hidden_size=64, num_layers=2, num_heads=2, num_kv_heads=1,
                                 intermediate_size=128)
    graphdef, params = nnx.split(model)
    config = RolloutConfig(max_turn=2, response_length=16, max_model_len=1024, prompt_style="compact",
                           context_mode="full")
    engine = ContinuousEngine(graphdef, tok, config, 4, slots=4, chunk=4)
    seeds, groups = group_seeds(40, 2, 2)
    url = serve(openenv_app("SimpleSudoku", max_sessions=8))
    runs = [engine.run(params, make_env_batch(name, 4), seeds, groups, jax.random.key(7), tag="s")
            for name in ("SimpleSudoku", f"openenv:{url}")]
    for x, y in zip(runs[0].episodes, runs[1].episodes):
        assert [r.state for r in x.history] == [r.state for r in y.history]
        assert [r.response_tokens for r in x.history] == [r.response_tokens for r in y.history]
        assert (x.total_reward, x.num_turns, x.success) == (y.total_reward, y.num_turns, y.success)
    np.testing.assert_array_equal(runs[0].batch.tokens, runs[1].batch.tokens)
