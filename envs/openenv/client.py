"""`OpenEnvHostEnv`: a HostEnv whose episodes run on an OpenEnv environment server, through OpenEnv's own client
(`openenv.core.GenericEnvClient`, one WebSocket session per env instance).

`--config.env.name=openenv:http://127.0.0.1:8000` names one (envs/registry.py). What the model reads and sends is
found from the server's `/schema`: the action's one string field takes the action text, and the observation's one
string field is the text (with several, the observation's fields as JSON); `action_field` / `observation_field`
choose them by name. The instruction is the server's `/metadata` description; our own envs served with
`python -m envs.serve --protocol openenv` also give their legend and action lookup (in `/state`), so a remote
episode is prompted as a local one.

A server that is gone, a reply that is not an observation, or no reply within `timeout_s` raises `OpenEnvError`,
which the host batch records as that episode's error; the run goes on (the next reset reconnects).
"""

from __future__ import annotations

import json
import math
import threading
from typing import Any

from envs.host_checks import step_result_problems
from envs.protocols import HostEnv
from envs.serve.jsonclient import JsonClient, ServiceError

_RESERVED = {"done", "reward", "metadata"}  # OpenEnv's own observation fields, not the env's text


class OpenEnvError(RuntimeError):
    """An OpenEnv server could not run a reset or step (gone, timed out, or it answered an error or no
    observation)."""


class OpenEnvUnavailable(OpenEnvError, ConnectionError):
    """No OpenEnv server answers at the URL when the env is built (a setup problem, which run.py reports in one
    line before any model work)."""


def string_fields(schema: dict[str, Any], exclude: set[str] = frozenset()) -> list[str]:
    """The string-typed properties of a JSON schema (pydantic's: {"properties": {name: {"type": ...}}})."""
    props = schema.get("properties") or {}
    return [name for name, prop in props.items() if name not in exclude and isinstance(prop, dict)
            and (prop.get("type") == "string" or any(p.get("type") == "string" for p in prop.get("anyOf", [])
                                                    if isinstance(p, dict)))]


class OpenEnvHostEnv(HostEnv):
    """One episode stream on an OpenEnv server at `url`; not thread-safe (one per episode slot).

    timeout_s bounds each reset and step (OpenEnv's message timeout); connect_timeout_s each (re)connection."""

    def __init__(self, url: str, action_field: str | None = None, observation_field: str | None = None,
                 timeout_s: float = 60.0, connect_timeout_s: float = 10.0):
        if not timeout_s > 0 or not connect_timeout_s > 0:
            raise ValueError(f"timeout_s and connect_timeout_s must be > 0, got {timeout_s} and {connect_timeout_s}.")
        http = JsonClient(url, timeout_s=connect_timeout_s, retries=1)
        self.url = http.base_url
        try:
            schema = http.call("GET", "/schema", idempotent=True)
            metadata = http.call("GET", "/metadata", idempotent=True)
        except ServiceError as e:
            raise OpenEnvUnavailable(f"No OpenEnv server answers at {url}: {e}. Start one (e.g. `python -m envs.serve "
                                     "--protocol openenv --env NAME --port PORT`) and pass its URL.") from e
        finally:
            http.close()
        try:  # our own served envs also give their prompt parts; other servers' states need not
            spec = JsonClient(url, timeout_s=connect_timeout_s, retries=0).call("GET", "/state", idempotent=True)
        except ServiceError:
            spec = {}
        self.action_field = _pick(action_field, string_fields(schema.get("action", {}), {"metadata"}), "action",
                                  "action_field", url)
        observations = string_fields(schema.get("observation", {}), _RESERVED)
        self.observation_field = observation_field or (observations[0] if len(observations) == 1 else None)
        self._instruction = str(metadata.get("description") or "")
        self._legend = str(spec.get("legend") or "")
        self.action_lookup = spec.get("action_lookup") or None
        self.action_names = spec.get("action_names") or None
        self.step_timeout_s = timeout_s + connect_timeout_s + 5.0  # our own error first, the batch's timeout last
        self._timeout_s, self._connect_timeout_s = timeout_s, connect_timeout_s
        self._client = None

    def instruction(self) -> str:
        return self._instruction

    def legend(self) -> str:
        return self._legend

    def _session(self):
        if self._client is None:
            from openenv.core import GenericEnvClient

            self._client = GenericEnvClient(base_url=self.url, connect_timeout_s=self._connect_timeout_s,
                                            message_timeout_s=self._timeout_s).sync()
        return self._client

    def _run(self, what: str, call) -> Any:
        try:
            return call(self._session())
        except Exception as e:  # noqa: BLE001 - OpenEnv's client raises many kinds; each ends only this episode
            self._drop()
            kind = "no answer within the timeout" if isinstance(e, TimeoutError) else f"{type(e).__name__}: {e}"
            raise OpenEnvError(f"OpenEnv {what} at {self.url} failed ({kind}).") from e

    def _text(self, observation: Any, where: str) -> str:
        if not isinstance(observation, dict):
            raise OpenEnvError(f"OpenEnv {where} at {self.url} answered observation {str(observation)[:80]!r}, not "
                               "an object.")
        if self.observation_field is not None:
            if not isinstance(observation.get(self.observation_field), str):
                raise OpenEnvError(f"OpenEnv {where} at {self.url} answered an observation without the text field "
                                   f"{self.observation_field!r} (got {str(observation)[:200]}).")
            return observation[self.observation_field]
        rest = {k: v for k, v in observation.items() if k not in _RESERVED}
        return json.dumps(rest, sort_keys=True, ensure_ascii=False)

    def reset(self, seed: int) -> tuple[str, dict[str, Any]]:
        result = self._run("reset", lambda c: c.reset(seed=int(seed)))
        return self._text(result.observation, "reset"), dict(_info(result))

    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        result = self._run("step", lambda c: c.step({self.action_field: str(action)}))
        text = self._text(result.observation, "step")
        reward = 0.0 if result.reward is None else result.reward
        truncated = bool(result.observation.get("truncated", False)) if result.done else False
        fields = (text, reward, bool(result.done) and not truncated, truncated, _info(result))
        problems = step_result_problems(fields) or ([] if math.isfinite(float(reward)) else
                                                    [f"the non-finite reward {reward}"])
        if problems or not isinstance(result.done, bool):
            problems = problems or [f"done {result.done!r}, not a bool"]
            raise OpenEnvError(f"OpenEnv step at {self.url} answered {'; '.join(problems)}.")
        return text, float(reward), fields[2], truncated, fields[4]

    def _drop(self) -> None:
        """Forget the session (a failed call may leave it unusable): the next call connects a fresh one. It closes
        in the background: a close handshake with a hung server waits out its own timeout."""
        client, self._client = self._client, None
        if client is not None:
            threading.Thread(target=_close_quietly, args=(client,), daemon=True).start()

    def close(self) -> None:
        self._drop()


def _pick(chosen: str | None, fields: list[str], kind: str, flag: str, url: str) -> str:
    if chosen:
        return chosen
    if len(fields) == 1:
        return fields[0]
    raise ValueError(f"The OpenEnv {kind} schema at {url} has {len(fields)} string fields ({', '.join(fields) or 'none'}"
                     f"); name the one that takes the text with --config.env.kwargs.{flag}=NAME.")


def _close_quietly(client: Any) -> None:
    try:
        client.close()
    except Exception:  # noqa: BLE001 - closing a broken session is best effort
        pass


def _info(result: Any) -> dict[str, Any]:
    """The step's info: OpenEnv's metadata (the observation's own, or the top-level copy)."""
    info = result.metadata if isinstance(getattr(result, "metadata", None), dict) else None
    if info is None and isinstance(result.observation, dict):
        info = result.observation.get("metadata")
    return dict(info or {})
