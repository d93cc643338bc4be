"""Envs over HTTP: a server started on 127.0.0.1 inside each test, driven by real RemoteEnv
clients; bad requests, failing, slow, expired and crashed servers give errors, never hangs."""

from __future__ import annotations

import concurrent.futures
import http.client
import os
import re
import subprocess
import sys
import threading
import time

import pytest

from envs.registry import make
from envs.serve.client import RemoteEnv, RemoteEnvError
from envs.serve.http import JsonServer
from envs.serve.jsonclient import JsonClient, ServiceError
from envs.serve.server import EnvServer, EnvService, resolve_env_factory

TOY = "envs.serve.toy:CounterEnv"
REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# Generous bounds for a loaded machine: a client timeout far above any bound we assert, so a call
# that waited for its timeout instead of failing at once is told apart from a slow machine.
LONG_TIMEOUT_S = 30.0
NO_HANG_S = 20.0


@pytest.fixture
def toy_server(request):
    kwargs = getattr(request, "param", {})
    srv = EnvServer(TOY, port=0, **kwargs).start_background()
    yield srv
    srv.stop()


def _status(url: str, method: str, path: str, body=None) -> tuple[int, str]:
    try:
        JsonClient(url, timeout_s=LONG_TIMEOUT_S, retries=0).call(method, path, body, idempotent=False)
    except ServiceError as e:
        return e.status, str(e)
    return 200, ""


def test_webshop_remote_matches_local():
    srv = EnvServer("WebShop", port=0).start_background()
    try:
        remote, local = RemoteEnv(srv.url, timeout_s=LONG_TIMEOUT_S), make("WebShop")
        assert remote.instruction() == local.instruction()
        assert remote.reset(10000) == local.reset(10000)
        goal = local.session.goal
        for action in [f"search[{goal.query}]", "click[next >]", "click[< prev]", f"search[{goal.asin}]",
                       "click[back to search]", f"search[{local.site.catalog.by_asin[goal.asin].title}]",
                       f"click[{goal.asin.lower()}]", *(f"click[{v}]" for v in goal.goal_options), "click[buy now]"]:
            assert remote.step(action) == local.step(action)
        with pytest.raises(RemoteEnvError, match="409.*episode .* is over"):
            remote.step("click[buy now]")
        remote.close()
        assert srv.service.sessions == {}
    finally:
        srv.stop()


def test_spec_carries_action_lookup(toy_server):
    env = RemoteEnv(toy_server.url)
    assert env.action_lookup == {"up": 0, "down": 1} and env.action_names == ["Up", "Down"]
    assert env.instruction() == "Reach 10 by answering Up or Down."


def test_many_concurrent_episodes(toy_server):
    def episode(seed: int) -> tuple[float, int]:
        env = RemoteEnv(toy_server.url, timeout_s=LONG_TIMEOUT_S)
        obs, _ = env.reset(seed)
        total, steps, done = 0.0, 0, False
        while not done and steps < 20:
            obs, r, term, trunc, _ = env.step("up")
            total, steps, done = total + r, steps + 1, term or trunc
        env.close()
        return total, steps

    with concurrent.futures.ThreadPoolExecutor(32) as pool:
        results = list(pool.map(episode, range(64)))
    assert all(total == 1.0 for total, _ in results)
    assert [steps for _, steps in results] == [10 - seed % 5 for seed in range(64)]
    assert toy_server.service.sessions == {}


def test_session_reuse_across_resets(toy_server):
    env = RemoteEnv(toy_server.url)
    env.reset(1)
    first = env.session_id
    assert env.reset(2) == ("Value: 2", {}) and env.session_id == first


def test_bad_requests_get_4xx(toy_server):
    url = toy_server.url
    assert _status(url, "POST", "/reset", {})[0] == 400
    assert _status(url, "POST", "/reset", {"seed": "x"})[0] == 400
    assert _status(url, "POST", "/reset", {"seed": 1, "session_id": "nope"})[0] == 404
    assert _status(url, "POST", "/step", {"session_id": "nope", "action": "up"})[0] == 404
    env = RemoteEnv(url)
    env.reset(0)
    status, message = _status(url, "POST", "/step", {"session_id": env.session_id, "action": 5})
    assert status == 400 and "'action' must be str" in message
    assert _status(url, "POST", "/close", {"session_id": "nope"})[0] == 404
    assert _status(url, "GET", "/step")[0] == 405
    assert _status(url, "GET", "/nowhere")[0] == 404


def test_env_exception_is_500_and_session_recovers(toy_server):
    env = RemoteEnv(toy_server.url)
    env.reset(0)
    with pytest.raises(RemoteEnvError, match="500.*RuntimeError: CounterEnv was asked to fail"):
        env.step("fail")
    assert env.reset(3)[0] == "Value: 3" and env.step("up")[0] == "Value: 4"


@pytest.mark.parametrize("out, needle", [(("x", None, True, False, {}), "reward NoneType None, not a number"),
                                         (("x", 1.0, "False", False, {}), "terminated str 'False', not a bool"),
                                         (("x", 1.0, True, False, "ok"), "info str 'ok', not a dict"),
                                         (("x", 1.0, True, False, {"success": "False"}),
                                          "info['success'] str 'False', not a bool"),
                                         ((None, 1.0, True, False, {}), "observation NoneType None, not a str")])
def test_a_step_result_of_the_wrong_types_is_a_500_naming_the_field(out, needle):
    from envs.serve.http import HttpError
    from envs.serve.server import _check_step

    with pytest.raises(HttpError, match=re.escape(needle)) as caught:
        _check_step(out)
    assert caught.value.status == 500


@pytest.fixture
def gated_server(request):
    """A toy server whose steps block until the test ends (or 60 s): a slow env without sleeps to race."""
    release = threading.Event()
    srv = EnvServer(TOY, port=0, env_kwargs={"delay_s": 60.0, "release": release}, **request.param).start_background()
    yield srv
    release.set()
    srv.stop()


@pytest.mark.parametrize("gated_server", [{"step_timeout_s": 0.2}], indirect=True)
def test_slow_env_is_a_504_and_the_session_is_dropped(gated_server):
    env = RemoteEnv(gated_server.url, timeout_s=LONG_TIMEOUT_S)
    env.reset(0)
    start = time.monotonic()
    with pytest.raises(RemoteEnvError, match="504.*did not answer within 0.2 s"):
        env.step("up")
    assert time.monotonic() - start < NO_HANG_S  # the server's timeout, not the env's 60 s or the client's 30 s
    with pytest.raises(RemoteEnvError, match="404"):
        env.step("up")
    assert env.reset(1)[0] == "Value: 1"  # a new session replaces the dropped one


@pytest.mark.parametrize("gated_server", [{"step_timeout_s": 120}], indirect=True)
def test_client_timeout_and_busy_session(gated_server):
    env = RemoteEnv(gated_server.url, timeout_s=0.5)
    env.reset(0)
    start = time.monotonic()
    with pytest.raises(RemoteEnvError, match="timed out after 0.5 s"):
        env.step("up")
    assert time.monotonic() - start < NO_HANG_S
    status, message = _status(gated_server.url, "POST", "/step", {"session_id": env.session_id, "action": "up"})
    assert status == 409 and "busy" in message  # the first step is still blocked server-side


class FakeClock:
    def __init__(self):
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_idle_sessions_expire_and_capacity_is_bounded():
    clock = FakeClock()
    srv = EnvServer(TOY, port=0, session_ttl_s=60.0, max_sessions=2, clock=clock).start_background()
    try:
        a, b, c = (RemoteEnv(srv.url) for _ in range(3))
        a.reset(0), b.reset(0)
        assert _status(srv.url, "POST", "/reset", {"seed": 0})[0] == 503
        clock.now += 59.0
        b.step("up")  # b was used within the TTL: it stays
        clock.now += 2.0
        c.reset(0)  # sweeps a only
        assert len(srv.service.sessions) == 2
        with pytest.raises(RemoteEnvError, match="404.*expired"):
            a.step("up")
        assert b.step("up")[0] == "Value: 2"
        c.close()
        assert a.reset(2)[0] == "Value: 2"  # reset renews an expired session
    finally:
        srv.stop()


def test_an_abandoned_session_is_swept_by_any_call_not_only_a_reset():
    """A client that crashed leaves its session open; before, only the next /reset swept it, so a server that
    others only step kept every abandoned env open."""
    clock = FakeClock()
    srv = EnvServer(TOY, port=0, session_ttl_s=60.0, clock=clock).start_background()
    try:
        abandoned, live = RemoteEnv(srv.url), RemoteEnv(srv.url)
        abandoned.reset(0), live.reset(0)
        clock.now += 61.0
        assert _status(srv.url, "POST", "/step", {"session_id": live.session_id, "action": "up"})[0] == 404
        assert srv.service.sessions == {}  # both expired: the step swept the abandoned one too
        live.reset(1)
        clock.now += 61.0
        assert _status(srv.url, "GET", "/health")[0] == 200
        assert srv.service.sessions == {}
    finally:
        srv.stop()


@pytest.mark.parametrize("flag, kwargs, message", [
    ("--step-timeout=0", {"step_timeout_s": 0.0}, "--step-timeout must be > 0 seconds"),
    ("--session-ttl=-1", {"session_ttl_s": -1.0}, "--session-ttl must be > 0 seconds"),
    ("--max-sessions=0", {"max_sessions": 0}, "--max-sessions must be >= 1"),
    ("--workers=0", {"workers": 0}, "--workers must be >= 1"),
])
def test_server_limits_that_cannot_serve_are_refused(flag, kwargs, message, capsys):
    """A step timeout of 0 answered every call with an immediate 504; zero workers hung every call."""
    from envs.serve.__main__ import main

    with pytest.raises(ValueError, match=message):
        EnvService(TOY, **kwargs)
    with pytest.raises(SystemExit):
        main(["--env", TOY, "--port", "0", flag])
    assert message in capsys.readouterr().err


@pytest.fixture
def stalling_server():
    """/spec answers at once (step_timeout_s 0, so RemoteEnv's default timeout is 5 s); /reset stalls
    until the test ends (at most 60 s, so a forgotten stall ends by itself)."""
    release = threading.Event()

    def stall(_body):
        release.wait(60)
        return 200, {"session_id": "late", "observation": "", "info": {}}

    routes = {("GET", "/spec"): lambda _body: (200, {"env": "stall", "step_timeout_s": 0.0}),
              ("POST", "/reset"): stall}
    srv = JsonServer("127.0.0.1", 0, routes).start_background()
    yield srv
    release.set()
    srv.stop()


@pytest.mark.slow  # default run: too long for CI's 15 minutes on 2 cores
def test_default_timeout_is_the_one_reported(stalling_server):
    """The timeout set after /spec (step timeout + 5 s) governs the next calls on the same connection."""
    env = RemoteEnv(stalling_server.url, retries=0)
    assert env.step_timeout_s == 5.0
    start = time.monotonic()
    with pytest.raises(RemoteEnvError, match="timed out after 5 s"):
        env.reset(0)
    assert time.monotonic() - start < NO_HANG_S  # the first request's 30 s must not linger on the socket


def test_every_call_honours_the_current_timeout(stalling_server):
    client = JsonClient(stalling_server.url, timeout_s=LONG_TIMEOUT_S, retries=0)
    assert client.call("GET", "/spec", idempotent=True)["env"] == "stall"
    client.timeout_s = 0.3
    start = time.monotonic()
    with pytest.raises(ServiceError, match="timed out after 0.3 s"):
        client.call("POST", "/reset", {"seed": 0}, idempotent=False)
    assert time.monotonic() - start < NO_HANG_S
    client.timeout_s = LONG_TIMEOUT_S  # a longer timeout applies again on the reopened connection
    assert client.call("GET", "/spec", idempotent=True)["env"] == "stall"


def _raw_post(url: str, path: str, headers: dict[str, str], body: bytes) -> tuple[int, str, str | None]:
    """(status, body text, Connection header) of one hand-made request; bounded by a socket timeout."""
    host, port = url.rsplit("/", 1)[-1].split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=NO_HANG_S)
    try:
        conn.putrequest("POST", path)
        for k, v in headers.items():
            conn.putheader(k, v)
        conn.endheaders()
        conn.send(body)
        response = conn.getresponse()
        return response.status, response.read().decode(), response.getheader("Connection")
    finally:
        conn.close()


@pytest.mark.parametrize("length", ["-5", "-1", "1_0", "0x10", " "])
def test_bad_content_length_is_a_400_not_a_hang(toy_server, length):
    status, text, connection = _raw_post(toy_server.url, "/reset", {"Content-Length": length}, b'{"seed": 1}')
    assert status == 400 and "Content-Length" in text
    assert connection == "close"  # the unread body must not be parsed as the next request


@pytest.mark.parametrize("depth", [5_000, 100_000])
@pytest.mark.parametrize("opener,closer", [("[", "]"), ('{"a":', "}")])
def test_deeply_nested_json_is_a_400(toy_server, depth, opener, closer):
    body = (opener * depth + "1" + closer * depth).encode()  # under the 1 MiB body limit
    status, text, _ = _raw_post(toy_server.url, "/reset", {"Content-Length": str(len(body)),
                                                           "Content-Type": "application/json"}, body)
    assert status == 400 and "nested too deeply" in text
    assert _status(toy_server.url, "POST", "/reset", {"seed": 1})[0] == 200  # the server still serves


def test_jax_envs_are_refused():
    with pytest.raises(ValueError, match="JAX env"):
        resolve_env_factory("FrozenLake")


def test_unreachable_server_is_a_clear_error():
    srv = EnvServer(TOY, port=0)
    url = srv.url
    srv.server_close()
    srv.service.close()
    start = time.monotonic()
    with pytest.raises(RemoteEnvError, match="is the server running"):
        RemoteEnv(url, timeout_s=LONG_TIMEOUT_S, retries=1)
    assert time.monotonic() - start < NO_HANG_S  # refused at once, not after the timeout


def _read_line(proc: subprocess.Popen, timeout_s: float) -> str:
    out: list[str] = []
    reader = threading.Thread(target=lambda: out.append(proc.stdout.readline()), daemon=True)
    reader.start()
    reader.join(timeout_s)
    if not out:
        proc.kill()
        raise AssertionError(f"server printed nothing within {timeout_s} s")
    return out[0]


@pytest.mark.slow  # default run: too long for CI's 15 minutes on 2 cores
def test_cli_server_crash_mid_episode_is_reported():
    proc = subprocess.Popen([sys.executable, "-m", "envs.serve", "--env", TOY, "--port", "0"], cwd=REPO,
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        line = _read_line(proc, 60)
        assert "listening on http://127.0.0.1:" in line
        env = RemoteEnv(line.rsplit(" ", 1)[-1].strip(), timeout_s=LONG_TIMEOUT_S, retries=0)
        env.reset(0)
        assert env.step("up")[0] == "Value: 1"
        proc.kill()
        proc.wait(10)
        start = time.monotonic()
        with pytest.raises(RemoteEnvError, match="failed"):
            env.step("up")
        assert time.monotonic() - start < NO_HANG_S
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)


def test_host_batch_records_remote_failures_as_error_episodes():
    import numpy as np

    from envs.host_batch import HostEnvBatch

    good = EnvServer(TOY, port=0).start_background()
    doomed = EnvServer(TOY, port=0).start_background()
    try:
        envs = [RemoteEnv(good.url, timeout_s=LONG_TIMEOUT_S), RemoteEnv(good.url, timeout_s=LONG_TIMEOUT_S),
                RemoteEnv(doomed.url, timeout_s=LONG_TIMEOUT_S, retries=0)]
        batch = HostEnvBatch(envs)
        assert batch.reset([0, 1, 2]) == ["Value: 0", "Value: 1", "Value: 2"]
        doomed.stop()  # the server of episode 2 goes away mid-episode
        start = time.monotonic()
        result = batch.step([["up"], ["fail"], ["up"]], np.ones(3, bool))
        assert time.monotonic() - start < NO_HANG_S
        assert result.errors[0] == "" and result.observations[0] == "Value: 1"
        assert "RemoteEnvError" in result.errors[1] and "500" in result.errors[1]
        assert "RemoteEnvError" in result.errors[2] and "failed" in result.errors[2]
        assert result.terminated.tolist() == [False, True, True]
        batch.close()
    finally:
        good.stop()


def _canned_server(answers: dict[str, bytes]):
    """A server on 127.0.0.1 answering each path with fixed bytes (HTTP 200): an env server that misbehaves, or
    another service at the URL."""
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    class Canned(BaseHTTPRequestHandler):
        def do_POST(self):
            self.rfile.read(int(self.headers.get("Content-Length", 0)))
            self.do_GET()

        def do_GET(self):
            body = answers[self.path]
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    srv = ThreadingHTTPServer(("127.0.0.1", 0), Canned)
    srv.daemon_threads = True
    threading.Thread(target=srv.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
    return srv


_GOOD_STEP = {"observation": "o", "reward": 0.0, "terminated": False, "truncated": False, "info": {}}


@pytest.mark.parametrize("answer, needle", [
    ({**_GOOD_STEP, "reward": "1.0"}, "reward str '1.0', not a number"),
    ({**_GOOD_STEP, "terminated": "False"}, "terminated str 'False', not a bool"),
    ({**_GOOD_STEP, "reward": None}, "reward NoneType None, not a number"),
    ({**_GOOD_STEP, "observation": 5}, "observation int 5, not a str"),
    ({**_GOOD_STEP, "info": [1]}, "info list [1], not a dict"),
    ({**_GOOD_STEP, "info": {"success": "True"}}, "info['success'] str 'True', not a bool"),
    ({k: v for k, v in _GOOD_STEP.items() if k != "terminated"}, "answered without 'terminated'"),
    ("<html>proxy error</html>", "not a JSON object: '<html>proxy error</html>'"),
    ([1, 2], "not a JSON object: '[1, 2]'"),
])
def test_a_malformed_step_answer_fails_only_its_episode_naming_the_field(answer, needle):
    """A string reward is never trained on, the string "False" never ends an episode, a missing field or a page
    that is not JSON is no bare KeyError: the episode fails with what the server sent."""
    import json

    import numpy as np

    from envs.batch import HostEnvBatch

    body = answer.encode() if isinstance(answer, str) else json.dumps(answer).encode()
    bad = _canned_server({"/spec": b'{"env": "canned", "step_timeout_s": 1}', "/step": body, "/close": b"{}",
                          "/reset": b'{"session_id": "s", "observation": "start", "info": {}}'})
    good = EnvServer(TOY, port=0).start_background()
    try:
        batch = HostEnvBatch([RemoteEnv(f"http://127.0.0.1:{bad.server_address[1]}", retries=0),
                              RemoteEnv(good.url, timeout_s=LONG_TIMEOUT_S)])
        assert batch.reset([0, 1]) == ["start", "Value: 1"]
        result = batch.step([["up"], ["up"]], np.ones(2, bool))
        assert "RemoteEnvError" in result.errors[0] and needle in result.errors[0], result.errors[0]
        assert result.terminated.tolist() == [True, False] and result.rewards.tolist() == [0.0, 0.0]
        assert result.errors[1] == "" and result.observations[1] == "Value: 2"
        batch.close()
    finally:
        good.stop()
        bad.shutdown()
        bad.server_close()


@pytest.mark.parametrize("answer, needle", [(b'{"observation": "o"}', "answered without 'session_id'"),
                                            (b'{"session_id": 7, "observation": "o"}', "session_id int '7', not a str"),
                                            (b'{"session_id": "s", "observation": null}', "observation NoneType")])
def test_a_malformed_reset_answer_is_a_clear_error(answer, needle):
    bad = _canned_server({"/spec": b'{"env": "canned"}', "/reset": answer, "/close": b"{}"})
    try:
        env = RemoteEnv(f"http://127.0.0.1:{bad.server_address[1]}", timeout_s=LONG_TIMEOUT_S, retries=0)
        with pytest.raises(RemoteEnvError, match=needle):
            env.reset(0)
        assert env.session_id is None
    finally:
        bad.shutdown()
        bad.server_close()


class _ClosableEnv:
    """Records every instance and whether it was closed; reset seed 1 raises, seed 2 returns a bare string, seed 3
    blocks until `release`; the action "hang" blocks until `release` too."""

    built: list["_ClosableEnv"] = []
    release = threading.Event()
    action_lookup = action_names = None
    step_timeout_s = 60.0

    def __init__(self):
        self.closed = False
        _ClosableEnv.built.append(self)

    def instruction(self):
        return "Probe."

    def legend(self):
        return ""

    def reset(self, seed):
        if seed == 1:
            raise RuntimeError("no such level")
        if seed == 3:
            self.release.wait(60)
        return "bare string" if seed == 2 else ("start", "ok" if seed == 4 else {})

    def step(self, action):
        if action == "hang":
            self.release.wait(60)
        return "o", 0.0, False, False, {}

    def close(self):
        self.closed = True


def test_an_env_no_session_keeps_is_closed():
    """A failed or malformed first reset (a bare string, an info that is no dict), a timed-out first reset and a
    timed-out step leave no env open for ever: each is closed (a timed-out one once its call returns)."""
    from envs.registry import register

    register("ClosableProbe", _ClosableEnv, kind="host", overwrite=True)
    _ClosableEnv.built.clear()
    _ClosableEnv.release.clear()
    srv = EnvServer("ClosableProbe", port=0, step_timeout_s=0.3).start_background()
    try:
        for seed, status in ((1, "500"), (2, "500"), (4, "500.*info str 'ok', not a dict"), (3, "504")):
            with pytest.raises(RemoteEnvError, match=status):
                RemoteEnv(srv.url, timeout_s=LONG_TIMEOUT_S, retries=0).reset(seed)
        env = RemoteEnv(srv.url, timeout_s=LONG_TIMEOUT_S, retries=0)
        env.reset(0)
        with pytest.raises(RemoteEnvError, match="504"):
            env.step("hang")
        assert srv.service.sessions == {}  # the malformed reset's session is not kept either
        _ClosableEnv.release.set()
        deadline = time.monotonic() + NO_HANG_S
        while not all(e.closed for e in _ClosableEnv.built[1:]) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert len(_ClosableEnv.built) == 6 and [e.closed for e in _ClosableEnv.built[1:]] == [True] * 5
    finally:
        _ClosableEnv.release.set()
        srv.stop()


def test_a_reset_the_server_timed_out_is_not_retried():
    """A 504 means the env used the server's whole step timeout: retrying it (3 calls of 60 s by default) took a
    reset past the host batch's bound (step timeout + 5 s), which then reported a bare timeout instead of the 504."""
    calls = []

    def timed_out(_body):
        calls.append(1)
        return 504, {"error": "The stall env did not answer within 3 s"}

    routes = {("GET", "/spec"): lambda _body: (200, {"env": "stall", "step_timeout_s": 3.0}),
              ("POST", "/reset"): timed_out}
    srv = JsonServer("127.0.0.1", 0, routes).start_background()
    try:
        env = RemoteEnv(srv.url, retries=2)
        with pytest.raises(RemoteEnvError, match="504.*did not answer within 3 s"):
            env.reset(0)
        assert len(calls) == 1
        routes[("POST", "/reset")] = lambda _body: (calls.append(1), (503, {"error": "busy"}))[1]
        with pytest.raises(RemoteEnvError, match="503"):
            env.reset(0)
        assert len(calls) == 1 + 3  # other 5xx on an idempotent call are still retried
    finally:
        srv.stop()


class _NanRewardEnv(_ClosableEnv):
    """Steps to a NaN reward on the action "nan", else to 0.0."""

    def step(self, action):
        return "o", float("nan") if action == "nan" else 0.0, False, False, {"ratio": float("inf")}


def test_a_non_finite_reward_fails_its_step_and_every_answer_is_strict_json():
    """Before: the server sent the reward as the token NaN, which JSON does not have (a strict client fails on the
    whole answer, ours read it as a number and only the rollout caught it)."""
    import json

    from envs.registry import register

    register("NanRewardProbe", _NanRewardEnv, kind="host", overwrite=True)
    srv = EnvServer("NanRewardProbe", port=0).start_background()
    strict = dict(parse_constant=lambda token: pytest.fail(f"the server sent the non-JSON token {token}"))

    def post(path, body):
        conn = http.client.HTTPConnection("127.0.0.1", srv.server_address[1], timeout=LONG_TIMEOUT_S)
        conn.request("POST", path, json.dumps(body), {"Content-Type": "application/json"})
        answer = conn.getresponse()
        status, payload = answer.status, json.loads(answer.read(), **strict)
        conn.close()
        return status, payload

    try:
        status, answer = post("/reset", {"seed": 0})
        session = answer["session_id"]
        assert post("/step", {"session_id": session, "action": "ok"}) == (
            200, {"observation": "o", "reward": 0.0, "terminated": False, "truncated": False,
                  "info": {"ratio": "inf"}})
        status, answer = post("/step", {"session_id": session, "action": "nan"})
        assert status == 500 and "non-finite reward nan" in answer["error"]
        env = RemoteEnv(srv.url, timeout_s=LONG_TIMEOUT_S, retries=0)
        env.reset(0)
        with pytest.raises(RemoteEnvError, match="non-finite reward nan"):
            env.step("nan")
    finally:
        srv.stop()


@pytest.mark.parametrize("gated_server", [{"step_timeout_s": 120}], indirect=True)
def test_close_during_a_stuck_step_closes_the_session_at_once(gated_server):
    """A batch abandons a slot whose step outlived its timeout and closes the env from another thread. Before, the
    /close went over the stuck call's own connection: it never reached the server, whose session (and env) stayed
    open until its TTL, and the stuck call lost its connection under it."""
    env = RemoteEnv(gated_server.url, timeout_s=LONG_TIMEOUT_S)
    env.reset(0)
    session = env.session_id
    def step():  # blocked until the gate opens at teardown; how it ends then is not this test's matter
        try:
            env.step("up")
        except Exception:
            pass

    stuck = threading.Thread(target=step, daemon=True)
    stuck.start()
    deadline = time.monotonic() + NO_HANG_S
    while not gated_server.service.sessions[session].lock.locked() and time.monotonic() < deadline:
        time.sleep(0.01)  # the step is running server-side
    start = time.monotonic()
    env.close()
    assert time.monotonic() - start < NO_HANG_S
    assert session not in gated_server.service.sessions and env.session_id is None


def test_calls_past_a_pool_held_by_hung_envs_are_refused_at_once_naming_why():
    """A timed-out env call keeps its worker thread until it returns. Before, once hung calls held every worker, each
    new call queued behind them and came back after the whole step timeout as a 504 blaming an env it never
    reached; now it is a 503 at once saying what holds the workers, and the pool serves again when they return."""
    import json

    release = threading.Event()
    srv = EnvServer(TOY, port=0, step_timeout_s=0.3, workers=1,
                    env_kwargs={"delay_s": 60.0, "release": release}).start_background()
    try:
        env = RemoteEnv(srv.url, timeout_s=LONG_TIMEOUT_S, retries=0)
        env.reset(0)
        with pytest.raises(RemoteEnvError, match="504"):
            env.step("up")  # hangs in the env: its worker stays busy
        start = time.monotonic()
        status, message = _status(srv.url, "POST", "/reset", {"seed": 1})
        assert status == 503 and "All 1 env workers are held by" in message and "hung" in message
        assert time.monotonic() - start < 0.3  # not after another step timeout
        health = JsonClient(srv.url, timeout_s=LONG_TIMEOUT_S).call("GET", "/health", idempotent=True)
        assert (health["hung_calls"], health["workers"]) == (1, 1), json.dumps(health)
        release.set()
        deadline = time.monotonic() + NO_HANG_S
        while srv.service.hung_calls and time.monotonic() < deadline:
            time.sleep(0.01)
        assert RemoteEnv(srv.url, timeout_s=LONG_TIMEOUT_S).reset(1)[0] == "Value: 1"
    finally:
        release.set()
        srv.stop()


@pytest.mark.parametrize("seed_text,needle", [("9" * 5_000, "5000 digits"), ("-1", "'seed' must be"),
                                              (str(2**63), "'seed' must be")])
def test_a_seed_no_env_can_take_is_a_400_naming_it(toy_server, seed_text, needle):
    body = f'{{"seed": {seed_text}}}'.encode()  # 5,000 digits: past Python's int-from-text limit (4,300)
    status, text, _ = _raw_post(toy_server.url, "/reset", {"Content-Length": str(len(body)),
                                                           "Content-Type": "application/json"}, body)
    assert status == 400 and needle in text, text
    assert _status(toy_server.url, "POST", "/reset", {"seed": 2**63 - 1})[0] == 200  # the largest seed still serves
