"""A protocol-level stand-in for the Kimina Lean server, for tests (no Lean inside).

It speaks the real API (`POST /api/check`, `POST /api/checks`, `GET /health`, optional Bearer key)
on 127.0.0.1 with an ephemeral port, and answers the way Lean does for a fixed script of tactics
per theorem: the scripted tactic at each position is accepted and leaves the scripted goals
(reported as an "unsolved goals" error, like Lean), the last one closes the proof (no messages),
`sorry` gives a `sorries` entry, a tactic listed in `timeout_tactics` gives the server's timeout
error, anything else is a Lean error at the tactic's position.
"""

from __future__ import annotations

import dataclasses
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclasses.dataclass
class ScriptedProof:
    """`statement` (as in the code sent), `steps`: (tactic, goals left after it; "" = proved)."""

    statement: str
    initial_goals: str
    steps: list[tuple[str, str]]
    errors: dict[str, str] = dataclasses.field(default_factory=dict)  # tactic -> Lean error text


DEFAULT_SCRIPTS = (
    ScriptedProof(
        "theorem ragen_mul_subst (a b : ℝ) (h₀ : a = 2) (h₁ : b = 3) : a * b = 6 := by",
        "a b : ℝ\nh₀ : a = 2\nh₁ : b = 3\n⊢ a * b = 6",
        [("rw [h₀, h₁]", "a b : ℝ\nh₀ : a = 2\nh₁ : b = 3\n⊢ 2 * 3 = 6"), ("norm_num", "")],
        {"linarith": "linarith failed to find a contradiction\ncase a\na b : ℝ\nh₀ : a = 2\nh₁ : b = 3\n"
                     "a✝ : a * b < 6\n⊢ False"}),
    ScriptedProof("theorem ragen_add_zero (n : ℕ) : n + 0 = n := by", "n : ℕ\n⊢ n + 0 = n", [("simp", "")]),
)


def _pos(line: int, col: int) -> dict[str, int]:
    return {"line": line, "column": col}


def answer(code: str, scripts: tuple[ScriptedProof, ...], timeout_tactics: tuple[str, ...],
           limit: int) -> dict[str, Any]:
    """The Kimina result body (`error` or `response`) for one snippet."""
    lines = code.splitlines()
    script = next((s for s in scripts if s.statement in code), None)
    if script is None:
        return {"response": {"env": 0, "messages": [{"severity": "error", "pos": _pos(1, 0), "endPos": _pos(1, 1),
                                                      "data": "unknown theorem (not in the stand-in's script)"}]}}
    start = next(i for i, line in enumerate(lines) if script.statement.splitlines()[-1] in line)
    decl_pos = _pos(start + 1, 0)
    goals = script.initial_goals
    tactic_lines = [(start + 2 + k, t) for k, t in enumerate(lines[start + 1:]) if t.strip()]
    for k, (line_no, text) in enumerate(tactic_lines):
        tactic = text.strip()
        col = len(text) - len(text.lstrip())
        if tactic in timeout_tactics:
            return {"error": f"Lean REPL command timed out in {limit} seconds"}
        if tactic == "sorry":
            return {"response": {"env": 0, "sorries": [{"pos": _pos(line_no, col), "endPos": _pos(line_no, col + 5),
                                                         "goal": goals}],
                                 "messages": [{"severity": "warning", "pos": decl_pos, "endPos": _pos(start + 1, 7),
                                               "data": "declaration uses 'sorry'"}]}}
        if k < len(script.steps) and tactic == script.steps[k][0]:
            goals = script.steps[k][1]
            if not goals and k + 1 < len(tactic_lines):
                nxt_line, nxt = tactic_lines[k + 1]
                message = {"severity": "error", "pos": _pos(nxt_line, 2), "endPos": _pos(nxt_line, len(nxt)),
                           "data": "no goals to be proved"}
                return {"response": {"env": 0, "messages": [message]}}
            continue
        data = script.errors.get(tactic) or (f"unknown tactic '{tactic.split()[0]}'" if k >= len(script.steps)
                                             else f"tactic '{tactic.split()[0]}' failed\n{goals}")
        return {"response": {"env": 0, "messages": [
            {"severity": "error", "pos": _pos(line_no, col), "endPos": _pos(line_no, len(text)), "data": data},
            {"severity": "error", "pos": decl_pos, "endPos": _pos(start + 1, 7), "data": f"unsolved goals\n{goals}"}]}}
    if goals:
        return {"response": {"env": 0, "messages": [{"severity": "error", "pos": decl_pos, "endPos": _pos(start + 1, 7),
                                                      "data": f"unsolved goals\n{goals}"}]}}
    return {"response": {"env": 0}}


class StandInLeanServer:
    """Context manager: `with StandInLeanServer() as srv: srv.url`. Records POST bodies in `requests`
    and counts GET /health calls in `health_checks`."""

    def __init__(self, scripts: tuple[ScriptedProof, ...] = DEFAULT_SCRIPTS, api_key: str | None = None,
                 timeout_tactics: tuple[str, ...] = ("sleep_forever",), fail_first: int = 0):
        self.scripts, self.api_key, self.timeout_tactics = scripts, api_key, timeout_tactics
        self.fail_first = fail_first  # answer this many requests with HTTP 503 first (tests retries)
        self.requests: list[dict[str, Any]] = []
        self.health_checks = 0
        self._lock = threading.Lock()
        self._httpd: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        assert self._httpd is not None, "server not started"
        return f"http://127.0.0.1:{self._httpd.server_address[1]}"

    def start(self) -> "StandInLeanServer":
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def _send(self, code: int, body: Any) -> None:
                raw = json.dumps(body).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(raw)))
                self.end_headers()
                self.wfile.write(raw)

            def do_GET(self) -> None:
                if self.path.rstrip("/") in ("/health", ""):
                    with server._lock:
                        server.health_checks += 1
                    self._send(200, {"status": "ok"})
                else:
                    self._send(404, {"detail": "Not Found"})

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
                with server._lock:
                    server.requests.append(body)
                    failing = server.fail_first > 0
                    server.fail_first -= failing
                if failing:
                    return self._send(503, {"detail": "Service Unavailable"})
                auth = self.headers.get("Authorization", "")
                if server.api_key and auth.removeprefix("Bearer ").strip() != server.api_key:
                    return self._send(401, {"detail": "Invalid API key"})
                route = self.path.rstrip("/")
                if route not in ("/api/check", "/api/checks"):
                    return self._send(404, {"detail": "Not Found"})
                snippets = body.get("snippets") or []
                if not snippets:
                    return self._send(422, {"detail": "`snippets` must be provided and non empty"})
                limit = body.get("timeout", 30)
                results = [{"id": s["id"], "time": 0.01,
                            **answer(s["code"], server.scripts, server.timeout_tactics, limit)} for s in snippets]
                self._send(200, {"results": results} if route == "/api/check" else results)

        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
            self._thread.join(timeout=5)
            self._httpd = None

    def __enter__(self) -> "StandInLeanServer":
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()
