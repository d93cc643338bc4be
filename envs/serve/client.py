"""`RemoteEnv`: a HostEnv whose episodes run on an env server (`python -m envs.serve`).

The rollout uses it like a local env. A dead, slow or failing server raises RemoteEnvError
(with the cause and a hint) within `timeout_s`, so the host batch ends that episode with the
error recorded instead of hanging.
"""

from __future__ import annotations

from typing import Any

from envs.host_checks import step_result_problems
from envs.protocols import HostEnv
from envs.serve.jsonclient import JsonClient, ServiceError


CLOSE_TIMEOUT_S = 5.0  # a session's /close is best effort: never wait on it for a whole step timeout


class RemoteEnvError(ServiceError):
    """The env server could not run a reset/step (unreachable, timed out, or an error status)."""


class RemoteEnvUnavailable(RemoteEnvError, ConnectionError):
    """No env server answers /spec at the URL when the env is built (a ConnectionError: a setup problem, which
    run.py reports in one line before any model work)."""


class RemoteEnv(HostEnv):
    """One episode stream on a remote env server; not thread-safe (one per episode slot).

    url: the server, e.g. "http://10.0.0.5:8100"; timeout_s bounds every call (default: the
    server's step timeout + 5 s); retries apply to /spec and /reset only (steps are not repeated).
    """

    def __init__(self, url: str, timeout_s: float | None = None, retries: int = 2):
        self._client = JsonClient(url, timeout_s=timeout_s or 30.0, retries=retries)
        try:
            spec = self._call("GET", "/spec", None, idempotent=True)
        except RemoteEnvError as e:
            self._client.close()
            raise RemoteEnvUnavailable(f"RemoteEnv needs a running env server: {e}. Start one with `python -m "
                                       "envs.serve --env NAME --port PORT` (docs/remote_envs.md) and pass its URL.",
                                       e.status) from e
        if timeout_s is None:
            self._client.timeout_s = float(spec.get("step_timeout_s", 60.0)) + 5.0
        self.url = self._client.base_url
        self.env_name: str = spec.get("env", "")
        self._instruction: str = spec.get("instruction", "")
        self._legend: str = spec.get("legend", "")
        self.action_lookup = spec.get("action_lookup")
        self.action_names = spec.get("action_names")
        self.step_timeout_s = self._client.timeout_s
        self.session_id: str | None = None

    def _call(self, method: str, path: str, body: dict[str, Any] | None, idempotent: bool) -> dict[str, Any]:
        try:
            return self._client.call(method, path, body, idempotent=idempotent)
        except ServiceError as e:
            raise RemoteEnvError(f"Remote env: {e}", e.status) from e

    def instruction(self) -> str:
        return self._instruction

    def legend(self) -> str:
        return self._legend

    def reset(self, seed: int) -> tuple[str, dict[str, Any]]:
        body: dict[str, Any] = {"seed": int(seed)}
        if self.session_id is not None:
            body["session_id"] = self.session_id
        try:
            out = self._call("POST", "/reset", body, idempotent=True)
        except RemoteEnvError as e:
            if e.status != 404 or self.session_id is None:
                raise
            self.session_id = None  # the server expired our session: start a new one
            out = self._call("POST", "/reset", {"seed": int(seed)}, idempotent=True)
        session_id, observation = _fields(out, ("session_id", "observation"), f"{self.url}/reset")
        info = out.get("info") or {}
        problems = [f"{name} {type(value).__name__} {str(value)[:80]!r}, not a {kind}"
                    for name, value, kind in (("session_id", session_id, "str"), ("observation", observation, "str"),
                                              ("info", info, "dict"))
                    if not isinstance(value, dict if kind == "dict" else str)]
        if problems:
            raise RemoteEnvError(f"Remote env: {self.url}/reset answered {'; '.join(problems)}.")
        self.session_id = session_id
        return observation, info

    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        if self.session_id is None:
            raise RemoteEnvError("RemoteEnv.step called before reset(seed).")
        out = self._call("POST", "/step", {"session_id": self.session_id, "action": str(action)}, idempotent=False)
        fields = (*_fields(out, _STEP_FIELDS, f"{self.url}/step"), out.get("info"))
        problems = step_result_problems(fields)  # a reward "1.0" never counts, a terminated "False" never ends it
        if problems:
            raise RemoteEnvError(f"Remote env: {self.url}/step answered {'; '.join(problems)}.")
        observation, reward, terminated, truncated, info = fields
        return observation, float(reward), bool(terminated), bool(truncated), dict(info or {})

    def close(self) -> None:
        """Close the server-side session (best effort) and the connection.

        The /close goes over a connection of its own: a batch closes an env whose step outlived its timeout from
        another thread, while that step still waits on the env's connection."""
        if self.session_id is not None:
            closer = JsonClient(self.url, timeout_s=min(self._client.timeout_s, CLOSE_TIMEOUT_S), retries=0)
            try:
                closer.call("POST", "/close", {"session_id": self.session_id}, idempotent=False)
            except ServiceError:
                pass
            finally:
                closer.close()
            self.session_id = None
        self._client.close()


_STEP_FIELDS = ("observation", "reward", "terminated", "truncated")


def _fields(answer: dict[str, Any], names: tuple[str, ...], where: str) -> list[Any]:
    """The named fields of a server's answer, or RemoteEnvError naming the missing ones (never a bare KeyError)."""
    missing = [name for name in names if name not in answer]
    if missing:
        raise RemoteEnvError(f"Remote env: {where} answered without {', '.join(map(repr, missing))} (got "
                             f"{str(answer)[:200]}); is the URL an env server's (`python -m envs.serve`)?")
    return [answer[name] for name in names]
