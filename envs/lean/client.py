"""HTTP client for the Kimina Lean Server API (project-numina/kimina-lean-server), stdlib only.

POST {api_url}/api/check  {"snippets": [{"id", "code"}], "timeout", "debug", "reuse", "infotree"}
  -> {"results": [{"id", "time", "error"?, "response"?: {"env", "messages"?, "sorries"?, ...},
                   "diagnostics"?}]}
GET  {api_url}/health -> {"status": "ok"}
Auth (optional): "Authorization: Bearer <key>". Transient failures (connection errors, 429/5xx,
non-JSON) are retried with exponential backoff; other HTTP errors fail at once.
"""

from __future__ import annotations

import dataclasses
import json
import time
import urllib.error
import urllib.request
import uuid
from typing import Any, Sequence

START_HINT = ("Start a Kimina Lean server (see docs/lean.md: `docker run -p 8000:8000 "
              "projectnumina/kimina-lean-server:2.0.0`) and point the env at it with server_url "
              "(--config.env.kwargs.server_url in run.py).")


class LeanServerError(RuntimeError):
    """The Lean server answered with an error or could not be reached."""


class LeanServerUnavailable(LeanServerError, ConnectionError):
    """No usable Lean server answers at the configured URL (a ConnectionError: a setup problem)."""


@dataclasses.dataclass
class ReplResult:
    """One snippet's answer: exactly one of `error` (server-level) or `response` (Lean REPL JSON)."""

    id: str
    time: float = 0.0
    error: str | None = None
    response: dict[str, Any] | None = None
    diagnostics: dict[str, Any] | None = None

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> "ReplResult":
        if not isinstance(data, dict) or "id" not in data:
            raise LeanServerError(f"malformed result from Lean server: {str(data)[:200]}")
        return cls(id=str(data["id"]), time=float(data.get("time") or 0.0), error=data.get("error"),
                   response=data.get("response"), diagnostics=data.get("diagnostics"))


_TRANSIENT_HTTP = {429, 500, 502, 503, 504}


class KiminaLeanClient:
    """Talks to a Kimina Lean server; `http_timeout` bounds each HTTP request (seconds)."""

    def __init__(self, api_url: str = "http://127.0.0.1:8000", api_key: str | None = None,
                 http_timeout: float = 60.0, max_retries: int = 3, backoff_s: float = 1.0):
        if max_retries < 1:
            raise ValueError(f"max_retries must be >= 1, got {max_retries}")
        self.api_url = api_url.rstrip("/")
        self.api_key = api_key
        self.http_timeout = http_timeout
        self.max_retries = max_retries
        self.backoff_s = backoff_s
        # Never route a local Lean server through an HTTP proxy from the environment.
        self._opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))

    def _request(self, method: str, path: str, payload: Any = None, timeout: float | None = None,
                 retries: int | None = None) -> Any:
        url = f"{self.api_url}/{path.lstrip('/')}"
        headers = {"Content-Type": "application/json", "Accept": "application/json"}
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        body = json.dumps(payload).encode() if payload is not None else None
        attempts = retries or self.max_retries
        last: Exception | None = None
        for attempt in range(attempts):
            if attempt:
                time.sleep(min(self.backoff_s * 2 ** (attempt - 1), 10.0))
            req = urllib.request.Request(url, data=body, headers=headers, method=method)
            try:
                with self._opener.open(req, timeout=timeout or self.http_timeout) as resp:
                    raw = resp.read()
                return json.loads(raw.decode("utf-8"))
            except urllib.error.HTTPError as e:
                detail = e.read()[:300].decode("utf-8", errors="replace")
                if e.code not in _TRANSIENT_HTTP:
                    raise LeanServerError(f"Lean server {method} {url} -> HTTP {e.code}: {detail}") from e
                last = LeanServerError(f"HTTP {e.code}: {detail}")
            except (urllib.error.URLError, ConnectionError, TimeoutError, OSError) as e:
                last = e
            except ValueError as e:
                last = LeanServerError(f"non-JSON answer from {url}: {e}")
        if isinstance(last, LeanServerError):
            raise LeanServerError(f"Lean server {method} {url} failed after {attempts} attempts: {last}")
        reason = getattr(last, "reason", last)
        raise LeanServerUnavailable(f"no Lean server reachable at {self.api_url} ({method} {path}: {reason}) "
                                    f"after {attempts} attempts. {START_HINT}")

    def health(self, timeout: float = 5.0, retries: int = 1) -> dict[str, Any]:
        """GET /health; raises LeanServerUnavailable quickly when nothing listens."""
        return self._request("GET", "/health", timeout=timeout, retries=retries)

    def check(self, codes: Sequence[str] | str, timeout: int = 30, debug: bool = False, reuse: bool = True,
              infotree: str | None = None) -> list[ReplResult]:
        """Check Lean snippets; `timeout` is the server-side Lean time limit per snippet (seconds)."""
        codes = [codes] if isinstance(codes, str) else list(codes)
        snippets = [{"id": f"ragen-{uuid.uuid4().hex}", "code": c} for c in codes]
        payload = {"snippets": snippets, "timeout": int(timeout), "debug": debug, "reuse": reuse,
                   "infotree": infotree}
        data = self._request("POST", "/api/check", payload, timeout=max(self.http_timeout, timeout + 5))
        results = data.get("results") if isinstance(data, dict) else data
        if not isinstance(results, list) or len(results) != len(snippets):
            raise LeanServerError(f"Lean server returned {str(data)[:200]} for {len(snippets)} snippet(s)")
        return [ReplResult.from_json(r) for r in results]
