"""An ASGI app (Starlette, FastAPI) served by uvicorn on a background thread, for tests and in-process use: the
counterpart of `JsonServer.start_background` for the servers built on an ASGI framework."""

from __future__ import annotations

import socket
import threading
import time
from typing import Any


class AsgiServer:
    """uvicorn serving `app` on a thread; port 0 picks a free one (see `.url`). `stop()` ends it."""

    def __init__(self, app: Any, host: str = "127.0.0.1", port: int = 0):
        import uvicorn

        self.socket = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET)
        self.socket.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.socket.bind((host, port))
        self.server = uvicorn.Server(uvicorn.Config(app, log_level="warning", timeout_graceful_shutdown=5))
        self.thread = threading.Thread(target=self.server.run, kwargs={"sockets": [self.socket]}, daemon=True)

    @property
    def url(self) -> str:
        host, port = self.socket.getsockname()[:2]
        return f"http://{host}:{port}"

    def start(self, timeout_s: float = 30.0) -> "AsgiServer":
        self.thread.start()
        deadline = time.monotonic() + timeout_s
        while not self.server.started:
            if not self.thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError(f"The server did not start within {timeout_s:g} s.")
            time.sleep(0.01)
        return self

    def stop(self) -> None:
        """Stop serving; open connections (WebSockets too) are closed."""
        self.server.should_exit = True
        self.thread.join(10)
        self.socket.close()
