"""Ctrl-C (SIGINT) and SIGTERM (a scheduler's preemption) during RL: finish the step, save it, stop.

Without this, either signal killed the run mid-step and lost every step since the last checkpoint (all of
them in a preset with trainer.save_every=0). A second signal stops at once, as before. With several processes
(hosts), a signal to any of them stops all after the same step (`StopRequests.agreed`, one small collective per
step), so their checkpoint is one step's.
"""

from __future__ import annotations

import logging
import signal
import threading
from typing import Any

from ragen_jax.sharding.distributed import agree_max

logger = logging.getLogger(__name__)

SIGNALS = (signal.SIGINT, signal.SIGTERM)


class StopRequests:
    """Context manager: while open, SIGINT/SIGTERM set `.received` (the signal's name) instead of killing the
    process; the loop asks `agreed()` after each step. The second signal restores the earlier handlers and is
    delivered to them (KeyboardInterrupt, or the default termination). `enabled=False` (or not the main
    thread) leaves the handlers alone."""

    def __init__(self, enabled: bool = True):
        self.enabled = enabled and threading.current_thread() is threading.main_thread()
        self.received: str | None = None
        self._signum = 0
        self._previous: dict[int, Any] = {}

    def agreed(self) -> str | None:
        """The signal on which every process stops after this step (any process's; every process must call
        this after each step, as it is a collective with several), or None to go on."""
        signum = agree_max(self._signum)[0]
        if signum and self.received is None:  # another process got it
            self.received = signal.Signals(signum).name
        return self.received

    def __enter__(self) -> "StopRequests":
        if self.enabled:
            self._previous = {s: signal.signal(s, self._handle) for s in SIGNALS}
        return self

    def __exit__(self, *exc) -> None:
        self._restore()

    def _restore(self) -> None:
        for s, handler in self._previous.items():
            signal.signal(s, handler)
        self._previous = {}

    def _handle(self, signum: int, frame: Any) -> None:
        name = signal.Signals(signum).name
        if self.received is not None:  # the second one: stop now, the way the signal would have
            self._restore()
            signal.raise_signal(signum)
            return
        self.received, self._signum = name, signum
        logger.warning("%s received: the run stops after this step and saves it (send it again to stop at once, "
                       "losing the step).", name)


def stop_message(signal_name: str) -> str:
    """The stop reason a run interrupted by `signal_name` reports."""
    return f"stopped by {signal_name}; continue it with --config.trainer.resume=True and the same --workdir"
