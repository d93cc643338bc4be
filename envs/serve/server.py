"""Serve any registered host env over HTTP: many concurrent episodes, each a session with its own
env instance, with per-call timeouts and idle-session expiry.

Endpoints (JSON): `GET /health`; `GET /spec` -> {env, instruction, legend, action_lookup,
action_names, step_timeout_s}; `POST /reset {seed, session_id?}` -> {session_id, observation,
info}; `POST /step {session_id, action}` -> {observation, reward, terminated, truncated, info};
`POST /close {session_id}`. Errors: 400 bad body, 404 unknown session, 409 session busy or
episode over, 500 the env raised, 503 too many sessions or every worker held by hung env calls, 504
the env call timed out (the session is dropped, since its env may still be running).
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import math
import threading
import time
import uuid
from typing import Any, Callable

from envs.host_checks import step_result_problems
from envs.protocols import HostEnv
from envs.registry import EnvSpec, env_kwargs as build_kwargs, get_spec
from envs.serve.http import HttpError, JsonServer, require, require_seed, to_jsonable


def resolve_env_factory(env: str, env_kwargs: dict[str, Any] | None = None) -> Callable[[], HostEnv]:
    """A zero-argument builder for `env`: a registered name or a "package.module:Class" path."""
    if ":" in env:
        spec = EnvSpec(name=env, factory=env, kind="host")
    else:
        spec = get_spec(env)
        if spec.kind != "host":
            raise ValueError(f"{env!r} is a JAX env; only host envs are served (JAX envs run batched in-process).")
    factory, kwargs = spec.resolve_factory(), build_kwargs(spec, env_kwargs)
    return lambda: factory(**kwargs)


@dataclasses.dataclass
class _Session:
    env: HostEnv
    last_used: float
    lock: threading.Lock = dataclasses.field(default_factory=threading.Lock)
    episode_over: bool = True


class EnvService:
    """Sessions of one env kind; `routes()` is the HTTP route table. `clock` (seconds) times idle expiry."""

    def __init__(self, env: str, env_kwargs: dict[str, Any] | None = None, step_timeout_s: float = 60.0,
                 session_ttl_s: float = 900.0, max_sessions: int = 4096, workers: int = 256,
                 clock: Callable[[], float] = time.monotonic):
        problems = service_limit_problems(step_timeout_s=step_timeout_s, session_ttl_s=session_ttl_s,
                                          max_sessions=max_sessions, workers=workers)
        if problems:
            raise ValueError(f"Env server limits: {'; '.join(problems)}.")
        self.env_name = env
        self.make_env = resolve_env_factory(env, env_kwargs)
        probe = self.make_env()  # fail at start-up, not on the first request
        self.spec = {
            "env": env, "instruction": probe.instruction(), "legend": probe.legend(),
            "action_lookup": probe.action_lookup, "action_names": probe.action_names,
            "step_timeout_s": step_timeout_s,
        }
        probe.close()
        self.step_timeout_s, self.session_ttl_s, self.max_sessions = step_timeout_s, session_ttl_s, max_sessions
        self.clock = clock
        self.sessions: dict[str, _Session] = {}
        self._lock = threading.Lock()
        self._pool = concurrent.futures.ThreadPoolExecutor(max_workers=workers, thread_name_prefix="env")
        self.workers = workers
        self.hung_calls = 0  # env calls past the step timeout that still hold a worker
        self._last_sweep = 0.0

    def close(self) -> None:
        with self._lock:
            sessions, self.sessions = list(self.sessions.values()), {}
        for s in sessions:
            self._close_env(s.env)
        self._pool.shutdown(wait=False, cancel_futures=True)

    @staticmethod
    def _close_env(env: HostEnv | None) -> None:
        if env is None:  # a session whose env is still being built
            return
        try:
            env.close()
        except Exception:
            pass

    def _sweep(self) -> None:
        """Close sessions idle for longer than the TTL (checked at most once a second)."""
        now = self.clock()
        if now - self._last_sweep < min(1.0, self.session_ttl_s / 2):
            return
        self._last_sweep = now
        with self._lock:
            stale = [k for k, s in self.sessions.items()
                     if now - s.last_used > self.session_ttl_s and not s.lock.locked()]
            dropped = [self.sessions.pop(k) for k in stale]
        for s in dropped:
            self._close_env(s.env)

    def _session(self, session_id: str) -> _Session:
        with self._lock:
            session = self.sessions.get(session_id)
        if session is None:
            raise HttpError(404, f"Unknown session {session_id!r} (closed or expired after "
                                 f"{self.session_ttl_s:g} s idle); call /reset without session_id.")
        return session

    def _run(self, session_id: str, session: _Session, fn: Callable[[], Any]) -> Any:
        """Run one env call under the session lock with the step timeout."""
        if not session.lock.acquire(blocking=False):
            raise HttpError(409, f"Session {session_id!r} is busy with another call; send one call at a time.")
        try:
            with self._lock:
                if self.hung_calls >= self.workers:  # the call would wait for a worker that never comes back
                    raise HttpError(503, f"All {self.workers} env workers are held by {self.env_name} calls that "
                                         f"outlived the {self.step_timeout_s:g} s timeout and never returned (hung "
                                         "envs); restart the server, or start it with more --workers.")
            future = self._pool.submit(fn)
            try:
                return future.result(timeout=self.step_timeout_s)
            except concurrent.futures.TimeoutError:
                with self._lock:
                    self.sessions.pop(session_id, None)
                    self.hung_calls += 1
                # the dropped env is closed once its call returns (closing it now would race the running call)
                future.add_done_callback(lambda _: self._call_returned(session.env))
                raise HttpError(504, f"The {self.env_name} env did not answer within {self.step_timeout_s:g} s; "
                                     f"session {session_id!r} was dropped.") from None
            except HttpError:
                raise
            except Exception as e:
                session.episode_over = True
                raise HttpError(500, f"The {self.env_name} env raised {type(e).__name__}: {e}") from None
        finally:
            session.last_used = self.clock()
            session.lock.release()

    def _call_returned(self, env: HostEnv | None) -> None:
        """A timed-out call finally returned: its worker is free again and its dropped env is closed."""
        with self._lock:
            self.hung_calls -= 1
        self._close_env(env)

    # ---- routes
    def health(self, _: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        self._sweep()
        return 200, {"status": "ok", "env": self.env_name, "sessions": len(self.sessions),
                     "hung_calls": self.hung_calls, "workers": self.workers}

    def get_spec(self, _: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        return 200, to_jsonable(self.spec)

    def reset(self, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        seed = require_seed(body, 'Send {"seed": 123} (and "session_id" to reuse a session).')
        self._sweep()
        session_id = body.get("session_id")
        if session_id is not None:
            if not isinstance(session_id, str):
                raise HttpError(400, "Field 'session_id' must be a string.")
            session = self._session(session_id)
        else:
            with self._lock:
                if len(self.sessions) >= self.max_sessions:
                    raise HttpError(503, f"Too many sessions ({self.max_sessions}); close finished ones with /close.")
            session_id, session = uuid.uuid4().hex, None

        if session is None:  # a new session: build its env inside the timeout too
            session = _Session(env=None, last_used=self.clock())  # type: ignore[arg-type]
            try:
                out = self._run(session_id, session, lambda: self._build_and_reset(session, seed))
                observation, info = _check_reset(out)
            except HttpError as e:
                if e.status != 504:  # no session holds the env (a timed-out one is closed when its call returns)
                    self._close_env(session.env)
                raise
            session.episode_over = False
            with self._lock:
                self.sessions[session_id] = session
        else:
            session.episode_over = True  # no step on an env whose reset failed
            observation, info = _check_reset(self._run(session_id, session, lambda: session.env.reset(seed)))
            session.episode_over = False
        return 200, {"session_id": session_id, "observation": observation, "info": to_jsonable(info)}

    def _build_and_reset(self, session: _Session, seed: int) -> Any:
        session.env = self.make_env()
        return session.env.reset(seed)

    def step(self, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        session_id = require(body, "session_id", str, "Call /reset first to get a session_id.")
        action = require(body, "action", str, 'Send {"session_id": "...", "action": "..."}.')
        self._sweep()  # abandoned sessions go on any call, not only on the next /reset
        session = self._session(session_id)
        if session.episode_over:
            raise HttpError(409, f"The episode of session {session_id!r} is over; call /reset with it.")
        out = self._run(session_id, session, lambda: session.env.step(action))
        observation, reward, terminated, truncated, info = _check_step(out)
        session.episode_over = terminated or truncated
        return 200, {"observation": observation, "reward": reward, "terminated": terminated,
                     "truncated": truncated, "info": to_jsonable(info)}

    def close_session(self, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        session_id = require(body, "session_id", str)
        self._sweep()
        with self._lock:
            session = self.sessions.pop(session_id, None)
        if session is None:
            raise HttpError(404, f"Unknown session {session_id!r}.")
        self._close_env(session.env)
        return 200, {"closed": session_id}

    def routes(self) -> dict[tuple[str, str], Any]:
        return {("GET", "/health"): self.health, ("GET", "/spec"): self.get_spec, ("POST", "/reset"): self.reset,
                ("POST", "/step"): self.step, ("POST", "/close"): self.close_session}


def service_limit_problems(*, step_timeout_s: float, session_ttl_s: float, max_sessions: int,
                           workers: int) -> list[str]:
    """What is wrong with an env server's limits (each as its --flag says it), empty when nothing is."""
    problems = []
    if not step_timeout_s > 0:  # 0 or less answered every call with an immediate 504
        problems.append(f"--step-timeout must be > 0 seconds (got {step_timeout_s:g})")
    if not session_ttl_s > 0:
        problems.append(f"--session-ttl must be > 0 seconds (got {session_ttl_s:g})")
    if max_sessions < 1:
        problems.append(f"--max-sessions must be >= 1 (got {max_sessions})")
    if workers < 1:
        problems.append(f"--workers must be >= 1 (got {workers})")
    return problems


def _check_reset(out: Any) -> tuple[str, dict[str, Any]]:
    if not (isinstance(out, tuple) and len(out) == 2 and isinstance(out[0], str)):
        raise HttpError(500, f"env.reset must return (str, dict), got {type(out).__name__}.")
    if out[1] is not None and not isinstance(out[1], dict):
        raise HttpError(500, f"env.reset returned info {type(out[1]).__name__} {str(out[1])[:80]!r}, not a dict; it "
                             "must return (str, dict).")
    return out[0], dict(out[1] or {})


def _check_step(out: Any) -> tuple[str, float, bool, bool, dict[str, Any]]:
    if not (isinstance(out, tuple) and len(out) == 5):
        raise HttpError(500, "env.step must return (str, reward, terminated, truncated, info).")
    problems = step_result_problems(out)  # never float("1.0") nor bool("False") read as a result
    if problems:
        raise HttpError(500, f"env.step returned {'; '.join(problems)}; it must return (str, reward, terminated, "
                             "truncated, info).")
    if not math.isfinite(float(out[1])):  # JSON has no NaN: never send the non-standard token, fail the step
        raise HttpError(500, f"env.step returned the non-finite reward {float(out[1])}; the episode cannot be "
                             "scored. Return a finite float.")
    return out[0], float(out[1]), bool(out[2]), bool(out[3]), dict(out[4] or {})


class EnvServer(JsonServer):
    """An HTTP server for one env kind (port 0 picks a free port; see `.url`)."""

    def __init__(self, env: str, host: str = "127.0.0.1", port: int = 8100, env_kwargs: dict[str, Any] | None = None,
                 verbose: bool = False, **service_kwargs: Any):
        self.service = EnvService(env, env_kwargs, **service_kwargs)
        super().__init__(host, port, self.service.routes(), verbose=verbose)

    def stop(self) -> None:
        super().stop()
        self.service.close()
