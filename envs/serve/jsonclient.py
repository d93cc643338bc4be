"""A keep-alive JSON client over `http.client` with timeouts and retries for idempotent calls."""

from __future__ import annotations

import http.client
import json
import socket
import time
import urllib.parse
from typing import Any


# Reopen a connection idle for longer than this (servers close idle ones after 300 s).
IDLE_RECONNECT_S = 60.0


class ServiceError(RuntimeError):
    """A service could not be reached, timed out, or answered with an error status."""

    def __init__(self, message: str, status: int | None = None):
        super().__init__(message)
        self.status = status


class JsonClient:
    """One persistent connection to `base_url`; not thread-safe (use one client per thread).

    `timeout_s` (changeable between calls) bounds each wait of a call: connect, send, each read.
    """

    def __init__(self, base_url: str, timeout_s: float = 30.0, retries: int = 2, backoff_s: float = 0.2):
        parsed = urllib.parse.urlparse(base_url if "//" in base_url else f"http://{base_url}")
        if parsed.scheme != "http" or not parsed.hostname:
            raise ValueError(f"Expected a URL like http://127.0.0.1:8000, got {base_url!r}.")
        self.base_url = f"http://{parsed.hostname}:{parsed.port or 80}"
        self.host, self.port = parsed.hostname, parsed.port or 80
        self.timeout_s = float(timeout_s)
        self.retries = int(retries)
        self.backoff_s = float(backoff_s)
        self._conn: http.client.HTTPConnection | None = None
        self._last_used = 0.0

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def _once(self, method: str, path: str, body: dict[str, Any] | None) -> dict[str, Any]:
        if self._conn is not None and time.monotonic() - self._last_used > IDLE_RECONNECT_S:
            self.close()  # the server may have dropped an idle keep-alive connection
        if self._conn is None:
            self._conn = http.client.HTTPConnection(self.host, self.port, timeout=self.timeout_s)
        self._apply_timeout(self._conn)
        data = json.dumps(body).encode("utf-8") if body is not None else None
        headers = {"Content-Type": "application/json"} if data is not None else {}
        try:
            self._conn.request(method, path, body=data, headers=headers)
            response = self._conn.getresponse()
            raw = response.read()
        except BaseException:
            self.close()  # the connection is in an unknown state; never reuse it
            raise
        self._last_used = time.monotonic()
        try:
            payload = json.loads(raw) if raw else {}
        except (json.JSONDecodeError, UnicodeDecodeError, RecursionError):
            payload = None
        text = raw[:200].decode("utf-8", "replace")
        if response.status >= 400:
            message = payload.get("error", "") if isinstance(payload, dict) else text
            raise ServiceError(f"{method} {self.base_url}{path} -> HTTP {response.status}: {message}", response.status)
        if not isinstance(payload, dict):  # never hand a caller an HTML page or a list as if it were the answer
            raise ServiceError(f"{method} {self.base_url}{path} -> HTTP {response.status} with a body that is not a "
                               f"JSON object: {text!r}; is the URL the service's (host, port)?", response.status)
        return payload

    def _apply_timeout(self, conn: http.client.HTTPConnection) -> None:
        """The current timeout on a kept-alive connection, which otherwise keeps its first one."""
        conn.timeout = self.timeout_s
        if conn.sock is not None:
            conn.sock.settimeout(self.timeout_s)

    def call(self, method: str, path: str, body: dict[str, Any] | None = None, *, idempotent: bool) -> dict[str, Any]:
        """Send one request; retry transport failures and 5xx only when `idempotent`, never a 504 (the server
        already waited its whole timeout: like our own timeout, a retry would multiply the wait). Raises
        ServiceError with the cause."""
        attempts = 1 + (self.retries if idempotent else 0)
        last: BaseException | None = None
        for attempt in range(attempts):
            try:
                return self._once(method, path, body)
            except ServiceError as e:
                if not (idempotent and e.status is not None and e.status >= 500 and e.status != 504):
                    raise
                last = e
            except (socket.timeout, TimeoutError) as e:
                raise ServiceError(
                    f"{method} {self.base_url}{path} timed out after {self.timeout_s:g} s "
                    "(server slow or hung; raise timeout_s if this is expected)."
                ) from e
            except (ConnectionError, http.client.HTTPException, OSError) as e:
                last = e
            if attempt + 1 < attempts:
                time.sleep(self.backoff_s * (2**attempt))
        if isinstance(last, ServiceError):
            raise last
        raise ServiceError(
            f"{method} {self.base_url}{path} failed: {type(last).__name__}: {last} "
            "(is the server running and reachable?)"
        ) from last
