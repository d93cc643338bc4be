"""Calls that may hang (a host env's reset or step): run concurrently, each with its own deadline."""

from __future__ import annotations

import threading
import time
from typing import Any, Callable, Sequence


def run_with_timeouts(calls: Sequence[Callable[[], Any] | None],
                      timeouts: Sequence[float]) -> list[tuple[Any, str, bool]]:
    """Run calls concurrently in daemon threads: (result, "", False) or (None, error text, still_running) per call.

    A call that raises gives its exception text (a TimeoutError it raised included); one still running after its
    timeout is abandoned (its thread is a daemon, so it never blocks the process) and reported as a timeout with
    still_running True: only then may its env still be busy.
    """
    boxes: list[dict] = [{} for _ in calls]
    threads: list[threading.Thread | None] = []
    for call, box in zip(calls, boxes):
        if call is None:
            threads.append(None)
            continue

        def target(call=call, box=box):
            try:
                box["result"] = call()
            except BaseException as e:  # noqa: BLE001 - any env failure ends only its episode
                box["error"] = f"{type(e).__name__}: {e}"

        thread = threading.Thread(target=target, daemon=True)
        thread.start()
        threads.append(thread)
    start = time.monotonic()
    results = []
    for thread, box, timeout in zip(threads, boxes, timeouts):
        if thread is None:
            results.append((None, "", False))
            continue
        thread.join(max(0.0, start + timeout - time.monotonic()))
        if thread.is_alive():
            results.append((None, f"TimeoutError: no answer within {timeout:g} s", True))
        elif "error" in box:
            results.append((None, box["error"], False))
        else:
            results.append((box["result"], "", False))
    return results
