"""Envs over HTTP: a server started on 127.0.0.1 inside each test, driven by real RemoteEnv
clients; bad requests, failing, slow, expired and crashed servers give errors, never hangs."""

from __future__ import annotations

import concurrent.futures
import os
import subprocess
import sys
import threading
import time

import pytest

from envs.registry import make
from envs.serve.client import RemoteEnv, RemoteEnvError
from envs.serve.jsonclient import JsonClient, ServiceError
from envs.serve.server import EnvServer, resolve_env_factory

TOY = "envs.serve.toy:CounterEnv"
REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture
def toy_server(request):
    kwargs = getattr(request, "param", {})
    srv = EnvServer(TOY, port=0, **kwargs).start_background()
    yield srv
    srv.stop()


def _status(url: str, method: str, path: str, body=None) -> tuple[int, str]:
    try:
        JsonClient(url, timeout_s=5, retries=0).call(method, path, body, idempotent=False)
    except ServiceError as e:
        return e.status, str(e)
    return 200, ""


def test_webshop_remote_matches_local():
    srv = EnvServer("WebShop", port=0).start_background()
    try:
        remote, local = RemoteEnv(srv.url, timeout_s=10), make("WebShop")
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
        env = RemoteEnv(toy_server.url, timeout_s=10)
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


@pytest.mark.parametrize("toy_server", [{"env_kwargs": {"delay_s": 1.0}, "step_timeout_s": 0.2}], indirect=True)
def test_slow_env_is_a_504_and_the_session_is_dropped(toy_server):
    env = RemoteEnv(toy_server.url, timeout_s=5)
    env.reset(0)
    start = time.monotonic()
    with pytest.raises(RemoteEnvError, match="504.*did not answer within 0.2 s"):
        env.step("up")
    assert time.monotonic() - start < 1.0
    with pytest.raises(RemoteEnvError, match="404"):
        env.step("up")
    assert env.reset(1)[0] == "Value: 1"  # a new session replaces the dropped one


@pytest.mark.parametrize("toy_server", [{"env_kwargs": {"delay_s": 0.6}, "step_timeout_s": 5}], indirect=True)
def test_client_timeout_and_busy_session(toy_server):
    env = RemoteEnv(toy_server.url, timeout_s=0.2)
    env.reset(0)
    start = time.monotonic()
    with pytest.raises(RemoteEnvError, match="timed out after 0.2 s"):
        env.step("up")
    assert time.monotonic() - start < 0.6
    status, message = _status(toy_server.url, "POST", "/step", {"session_id": env.session_id, "action": "up"})
    assert status == 409 and "busy" in message  # the first step is still running server-side


@pytest.mark.parametrize("toy_server", [{"session_ttl_s": 0.2, "max_sessions": 2}], indirect=True)
def test_idle_sessions_expire_and_capacity_is_bounded(toy_server):
    a, b, c = (RemoteEnv(toy_server.url) for _ in range(3))
    a.reset(0), b.reset(0)
    assert _status(toy_server.url, "POST", "/reset", {"seed": 0})[0] == 503
    time.sleep(0.35)
    c.reset(0)  # sweeps a and b
    assert len(toy_server.service.sessions) == 1
    with pytest.raises(RemoteEnvError, match="404.*expired"):
        a.step("up")
    assert a.reset(2)[0] == "Value: 2"  # reset renews an expired session


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
        RemoteEnv(url, timeout_s=1, retries=1)
    assert time.monotonic() - start < 3


def _read_line(proc: subprocess.Popen, timeout_s: float) -> str:
    out: list[str] = []
    reader = threading.Thread(target=lambda: out.append(proc.stdout.readline()), daemon=True)
    reader.start()
    reader.join(timeout_s)
    if not out:
        proc.kill()
        raise AssertionError(f"server printed nothing within {timeout_s} s")
    return out[0]


def test_cli_server_crash_mid_episode_is_reported():
    proc = subprocess.Popen([sys.executable, "-m", "envs.serve", "--env", TOY, "--port", "0"], cwd=REPO,
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        line = _read_line(proc, 60)
        assert "listening on http://127.0.0.1:" in line
        env = RemoteEnv(line.rsplit(" ", 1)[-1].strip(), timeout_s=5, retries=0)
        env.reset(0)
        assert env.step("up")[0] == "Value: 1"
        proc.kill()
        proc.wait(10)
        start = time.monotonic()
        with pytest.raises(RemoteEnvError, match="failed|timed out"):
            env.step("up")
        assert time.monotonic() - start < 6
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)


def test_host_batch_records_remote_failures_as_error_episodes():
    batch_module = pytest.importorskip("envs.batch")
    import numpy as np

    good = EnvServer(TOY, port=0).start_background()
    doomed = EnvServer(TOY, port=0).start_background()
    try:
        envs = [RemoteEnv(good.url, timeout_s=5), RemoteEnv(good.url, timeout_s=5), RemoteEnv(doomed.url, timeout_s=5, retries=0)]
        batch = batch_module.HostEnvBatch(envs)
        assert batch.reset([0, 1, 2]) == ["Value: 0", "Value: 1", "Value: 2"]
        doomed.stop()  # the server of episode 2 goes away mid-episode
        start = time.monotonic()
        result = batch.step([["up"], ["fail"], ["up"]], np.ones(3, bool))
        assert time.monotonic() - start < 5
        assert result.errors[0] == "" and result.observations[0] == "Value: 1"
        assert "RemoteEnvError" in result.errors[1] and "500" in result.errors[1]
        assert "RemoteEnvError" in result.errors[2] and "failed" in result.errors[2]
        assert result.terminated.tolist() == [False, True, True]
        batch.close()
    finally:
        good.stop()
