"""Any of our host envs as an OpenEnv environment: `python -m envs.serve --protocol openenv --env NAME`.

OpenEnv's own server (`openenv.core.env_server.create_fastapi_app`) runs it: each WebSocket session (`/ws`, what
OpenEnv's `EnvClient` speaks) gets its own env instance; the stateless HTTP `/reset` and `/step`, `/schema`,
`/metadata`, `/state` and `/health` are OpenEnv's too. The wire types:

- action `RagenAction {text}`: the action text `HostEnv.step` takes;
- observation `RagenObservation {text, truncated}` with OpenEnv's `reward`, `done` (terminated or truncated) and
  `metadata` (the step's info dict);
- state `RagenState`: OpenEnv's episode id and step count, the episode's seed, and the env's prompt parts
  (instruction, legend, action_lookup, action_names), which `envs.openenv.client.OpenEnvHostEnv` reads so a remote
  episode is prompted as a local one;
- `/metadata`: the env's name, its instruction as the description.

A bad request is a 400 naming the problem (OpenEnv's FastAPI answers 422); a reset seed must lie in [0, 2**63).
"""

from __future__ import annotations

import math
import secrets
from typing import Any, Callable

from fastapi import Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from openenv.core.env_server import (Action, ConcurrencyConfig, Environment, Observation, State,
                                     create_fastapi_app)
from openenv.core.env_server.types import EnvironmentMetadata
from pydantic import Field
from starlette.exceptions import HTTPException as StarletteHTTPException

from envs.host_checks import checked_reset, checked_step
from envs.timeouts import run_with_timeouts
from envs.protocols import HostEnv
from envs.serve.http import to_jsonable

MAX_SEED = 2**63


class BadSeed(ValueError):
    """A reset seed outside [0, 2**63): the client's error (400 over HTTP, an error reply over the WebSocket)."""


class RagenAction(Action):
    """One action: the text the model answered (a parsed action name for envs with an action lookup)."""

    text: str = Field(description="The action text, as HostEnv.step takes it")


class RagenObservation(Observation):
    """The env's text after a reset or step; `done` is terminated or truncated, `metadata` the info dict."""

    text: str = Field(default="", description="The observation text the model reads next")
    truncated: bool = Field(default=False, description="The episode ended by the env's own step cap")


class RagenState(State):
    """OpenEnv's episode id and step count, the episode's seed, and the env's prompt parts."""

    seed: int | None = Field(default=None, description="The seed of the current episode")
    instruction: str = Field(default="", description="The task description for the system prompt")
    legend: str = Field(default="", description="The symbol legend for the system prompt")
    action_lookup: dict[str, int] | None = Field(default=None, description="Action name (lower case) -> id")
    action_names: list[str] | None = Field(default=None, description="Display names of the actions, id order")


class HostEnvironment(Environment[RagenAction, RagenObservation, RagenState]):
    """One session's episodes of a host env. A reset or step that outlives `step_timeout_s` fails (OpenEnv answers
    the client with the error) and the env, which may still be running, is replaced at the next reset."""

    SUPPORTS_CONCURRENT_SESSIONS = True  # every session builds its own env instance

    def __init__(self, make_env: Callable[[], HostEnv], name: str, step_timeout_s: float = 60.0):
        super().__init__()
        self._make_env, self.name, self.step_timeout_s = make_env, name, step_timeout_s
        self.env: HostEnv | None = None
        self.over = True
        self._state = RagenState()

    def _spec(self, env: HostEnv) -> dict[str, Any]:
        return {"instruction": env.instruction(), "legend": env.legend(),
                "action_lookup": dict(env.action_lookup) if env.action_lookup else None,
                "action_names": list(env.action_names) if env.action_names else None}

    def _call(self, fn: Callable[[], Any]) -> Any:
        [(result, error, still_running)] = run_with_timeouts([fn], [self.step_timeout_s])
        if error:
            if still_running:
                self.env = None  # may still be running: never called again (a fresh one at the next reset)
            self.over = True
            raise RuntimeError(f"The {self.name} env failed: {error}")
        return result

    def reset(self, seed: int | None = None, episode_id: str | None = None, **kwargs: Any) -> RagenObservation:
        """The episode of `seed` (a fresh random one when None, as OpenEnv's clients may reset without one)."""
        if seed is None:
            seed = secrets.randbelow(2**31)
        if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed < MAX_SEED:
            shown = str(seed) if len(str(seed)) <= 30 else f"an integer of {len(str(seed))} digits"
            raise BadSeed(f"seed must be an integer in [0, 2**63), got {shown}.")
        self.over = True
        if self.env is None:
            self.env = self._call(self._make_env)
        env = self.env
        text, info = checked_reset(self._call(lambda: env.reset(seed)))
        self._state = RagenState(episode_id=episode_id, step_count=0, seed=seed, **self._spec(env))
        self.over = False
        return RagenObservation(text=text, metadata=to_jsonable(dict(info or {})))

    def step(self, action: RagenAction, timeout_s: float | None = None, **kwargs: Any) -> RagenObservation:
        if self.env is None or self.over:
            raise RuntimeError("No episode is running: reset first (after the episode ended or failed).")
        env = self.env
        text, reward, terminated, truncated, info = checked_step(self._call(lambda: env.step(action.text)),
                                                                   type(env).__name__)
        if not math.isfinite(float(reward)):
            self.over = True
            raise RuntimeError(f"The {self.name} env returned the non-finite reward {float(reward)}.")
        self._state.step_count += 1
        self.over = bool(terminated or truncated)
        return RagenObservation(text=text, reward=float(reward), done=self.over, truncated=bool(truncated),
                                metadata=to_jsonable(dict(info or {})))

    @property
    def state(self) -> RagenState:
        return self._state

    def get_metadata(self) -> EnvironmentMetadata:
        return EnvironmentMetadata(name=self.name, description=self._state.instruction, version="1.0.0",
                                   author="ragen-jax")

    def close(self) -> None:
        if self.env is not None:
            try:
                self.env.close()
            except Exception:  # noqa: BLE001 - closing is best effort
                pass
            self.env = None


def openenv_app(env: str, env_kwargs: dict[str, Any] | None = None, *, max_sessions: int = 256,
                session_ttl_s: float | None = 900.0, step_timeout_s: float = 60.0):
    """The FastAPI app serving registered host env `env` (or a "package.module:Class" path) over OpenEnv."""
    from envs.serve.server import resolve_env_factory

    make_env = resolve_env_factory(env, env_kwargs)
    probe = make_env()  # fail at start-up, not at the first session
    spec = HostEnvironment(make_env, env)._spec(probe)
    probe.close()

    def session() -> HostEnvironment:
        environment = HostEnvironment(make_env, env, step_timeout_s)
        environment._state = RagenState(**spec)  # the prompt parts are there before the first reset
        return environment

    app = create_fastapi_app(session, RagenAction, RagenObservation, env_name=env, state_cls=RagenState,
                             concurrency_config=ConcurrencyConfig(max_concurrent_envs=max_sessions,
                                                                  session_timeout=session_ttl_s))
    app.add_exception_handler(RequestValidationError, _invalid_request)
    app.add_exception_handler(BadSeed, _bad_seed)
    app.add_exception_handler(StarletteHTTPException, _http_error)
    return app


async def _invalid_request(_: Request, error: RequestValidationError) -> JSONResponse:
    """A request the schema refuses is the client's error: 400 with each problem's field and reason."""
    problems = "; ".join(f"{'.'.join(str(p) for p in e.get('loc', ()))}: {e.get('msg', '')}" for e in error.errors())
    return JSONResponse({"error": f"Bad request: {problems}", "detail": to_jsonable(error.errors())}, 400)


async def _bad_seed(_: Request, error: BadSeed) -> JSONResponse:
    return JSONResponse({"error": str(error), "detail": str(error)}, 400)


async def _http_error(request: Request, error: StarletteHTTPException) -> JSONResponse:
    """FastAPI's and OpenEnv's own errors, each client error a 400 with its reason: a body FastAPI could not parse
    (its "There was an error parsing the body" names no cause, e.g. a JSON number past Python's 4,300-digit limit),
    an action OpenEnv's schema refuses (its 422)."""
    status, detail = error.status_code, error.detail
    if status == 400 and error.__cause__ is not None:
        detail = f"{detail}: {type(error.__cause__).__name__}: {error.__cause__}"
    if status == 422:
        status = 400
        if isinstance(detail, list):
            detail = "Bad action: " + "; ".join(f"{'.'.join(str(p) for p in e.get('loc', ()))}: {e.get('msg', '')}"
                                                for e in detail if isinstance(e, dict))
    return JSONResponse({"error": detail, "detail": to_jsonable(detail)}, status, headers=error.headers)
