"""Small JSON-over-HTTP helpers shared by the env server and the retrieval server (stdlib only).

Handlers answer JSON with a Content-Length on HTTP/1.1 keep-alive connections; bad requests get
a 4xx JSON body `{"error": "..."}` that names the problem and the fix.
"""

from __future__ import annotations

import json
import math
import re
import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable

MAX_BODY_BYTES = 1 << 20
MAX_INT_DIGITS = 1000  # below Python's int-from-text limit (4,300 digits), which raises a bare ValueError
_DECIMAL = re.compile(r"[0-9]+")


class HttpError(Exception):
    """An error to answer with `status` and a JSON `{"error": message}` body; `close` ends the
    connection after the answer (when the request's body was not read, its bytes are no request)."""

    def __init__(self, status: int, message: str, close: bool = False):
        super().__init__(message)
        self.status = status
        self.message = message
        self.close = close


def to_jsonable(value: Any) -> Any:
    """Best-effort conversion of env info values (numpy scalars, sets, tuples) to JSON types."""
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else str(value)
    if isinstance(value, dict):
        return {str(k): to_jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, set, frozenset)):
        return [to_jsonable(v) for v in value]
    if hasattr(value, "item") and callable(value.item):  # numpy scalar / 0-d array
        try:
            return to_jsonable(value.item())
        except (ValueError, TypeError):
            pass
    if hasattr(value, "tolist"):
        return to_jsonable(value.tolist())
    return str(value)


def _bounded_int(text: str) -> int:
    digits = len(text.lstrip("-"))
    if digits > MAX_INT_DIGITS:
        raise HttpError(400, f"Body holds an integer of {digits} digits (at most {MAX_INT_DIGITS} are read); send "
                             "numbers that fit the field, e.g. a seed below 2**63.")
    return int(text)


def parse_json_object(raw: bytes | str) -> dict[str, Any]:
    """A request body -> its JSON object, or HttpError 400 naming what is wrong with it (never another exception:
    whatever a client sends is the client's error, whichever framework serves it)."""
    try:
        data = json.loads(raw, parse_int=_bounded_int)
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise HttpError(400, f"Body is not valid JSON ({e}); send a JSON object.") from None
    except RecursionError:
        raise HttpError(400, "Body is nested too deeply to decode; send a flat JSON object.") from None
    except ValueError as e:  # any other text the decoder cannot turn into values
        raise HttpError(400, f"Body cannot be decoded ({e}); send a JSON object.") from None
    if not isinstance(data, dict):
        raise HttpError(400, f"Body must be a JSON object, got {type(data).__name__}.")
    return data


Route = Callable[[dict[str, Any]], tuple[int, dict[str, Any]]]


class JsonHandler(BaseHTTPRequestHandler):
    """Dispatches `(method, path)` to `server.routes`; each route takes the JSON body (or {})."""

    protocol_version = "HTTP/1.1"
    timeout = 300  # idle keep-alive connections are closed after this many seconds

    def setup(self) -> None:
        super().setup()
        self.server.track(self.connection, add=True)  # type: ignore[attr-defined]

    def finish(self) -> None:
        self.server.track(self.connection, add=False)  # type: ignore[attr-defined]
        super().finish()

    def log_message(self, format: str, *args: Any) -> None:  # quiet by default
        if getattr(self.server, "verbose", False):
            super().log_message(format, *args)

    def _send(self, status: int, payload: dict[str, Any], close: bool = False) -> None:
        try:
            body = json.dumps(payload, allow_nan=False).encode("utf-8")  # strict JSON: any client can read it
        except ValueError as e:  # a route's non-finite float; JSON has no NaN token
            status, body = 500, json.dumps({"error": f"The answer held a non-finite number ({e})."}).encode("utf-8")
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        if close:
            self.send_header("Connection", "close")
            self.close_connection = True
        self.end_headers()
        self.wfile.write(body)

    def _read_json(self) -> dict[str, Any]:
        length_text = self.headers.get("Content-Length")
        if length_text is None:
            if self.command == "POST":
                raise HttpError(411, "POST needs a Content-Length header and a JSON object body.", close=True)
            return {}
        if not _DECIMAL.fullmatch(length_text.strip()):
            raise HttpError(400, f"Bad Content-Length {length_text!r}; send the body's size in bytes "
                                 "(a non-negative decimal integer).", close=True)
        length = int(length_text)
        if length > MAX_BODY_BYTES:
            raise HttpError(413, f"Body of {length} bytes exceeds the {MAX_BODY_BYTES}-byte limit.", close=True)
        raw = self.rfile.read(length) if length else b""
        if not raw:
            return {}
        return parse_json_object(raw)

    def _dispatch(self) -> None:
        path = self.path.split("?", 1)[0].rstrip("/") or "/"
        routes: dict[tuple[str, str], Route] = self.server.routes  # type: ignore[attr-defined]
        close = False
        try:
            body = self._read_json()
            route = routes.get((self.command, path))
            if route is None:
                allowed = sorted(m for (m, p) in routes if p == path)
                if allowed:
                    raise HttpError(405, f"{self.command} {path} not allowed; use {', '.join(allowed)}.")
                known = ", ".join(f"{m} {p}" for m, p in sorted(routes))
                raise HttpError(404, f"No endpoint {self.command} {path}. Endpoints: {known}.")
            status, payload = route(body)
        except HttpError as e:
            status, payload, close = e.status, {"error": e.message}, e.close
        except Exception as e:  # a bug in a route must not kill the connection silently
            status, payload = 500, {"error": f"{type(e).__name__}: {e}"}
        self._send(status, payload, close)

    do_GET = _dispatch
    do_POST = _dispatch


class JsonServer(ThreadingHTTPServer):
    """A threading HTTP server (one thread per connection) over a route table."""

    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, host: str, port: int, routes: dict[tuple[str, str], Route], verbose: bool = False):
        super().__init__((host, port), JsonHandler)
        self.routes = routes
        self.verbose = verbose
        self._thread: threading.Thread | None = None
        self._connections: set[socket.socket] = set()
        self._connections_lock = threading.Lock()

    def track(self, connection: socket.socket, add: bool) -> None:
        with self._connections_lock:
            (self._connections.add if add else self._connections.discard)(connection)

    @property
    def url(self) -> str:
        host, port = self.server_address[:2]
        return f"http://{host}:{port}"

    def serve_until_interrupted(self, on_close: Callable[[], Any] | None = None) -> None:
        """Serve in the foreground until Ctrl-C, then close the socket (and run `on_close`)."""
        try:
            self.serve_forever()
        except KeyboardInterrupt:
            pass
        finally:
            self.server_close()
            if on_close is not None:
                on_close()

    def start_background(self) -> "JsonServer":
        """Serve in a daemon thread (for tests and in-process use); `stop()` ends it."""
        self._thread = threading.Thread(target=self.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving and cut open keep-alive connections (clients see the server go away)."""
        self.shutdown()
        self.server_close()
        with self._connections_lock:
            connections = list(self._connections)
        for connection in connections:
            try:
                connection.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        if self._thread is not None:
            self._thread.join(timeout=5)


def require(body: dict[str, Any], key: str, kind: type | tuple[type, ...], hint: str = "") -> Any:
    """`body[key]` checked for presence and type, else a 400 that says what to send."""
    if key not in body:
        raise HttpError(400, f"Missing field {key!r}. {hint}".strip())
    value = body[key]
    if isinstance(value, bool) and bool not in (kind if isinstance(kind, tuple) else (kind,)):
        raise HttpError(400, f"Field {key!r} must be {_kind_name(kind)}, got bool.")
    if not isinstance(value, kind):
        raise HttpError(400, f"Field {key!r} must be {_kind_name(kind)}, got {type(value).__name__}.")
    return value


def require_seed(body: dict[str, Any], hint: str = "") -> int:
    """`body["seed"]`: an integer in [0, 2**63) (what numpy's and JAX's seeding take), else a 400 naming the range."""
    seed = require(body, "seed", int, hint)
    if not 0 <= seed < 2**63:
        shown = str(seed) if len(str(seed)) <= 30 else f"an integer of {len(str(abs(seed)))} digits"
        raise HttpError(400, f"Field 'seed' must be an integer in [0, 2**63), got {shown}.")
    return seed


def _kind_name(kind: type | tuple[type, ...]) -> str:
    kinds = kind if isinstance(kind, tuple) else (kind,)
    return " or ".join(k.__name__ for k in kinds)
