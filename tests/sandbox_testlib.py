"""Helpers for sandbox tests: programs that report when they ran, and the peak of their overlap."""

from __future__ import annotations

import contextlib
import threading
from typing import Iterator, Sequence

from envs.deepcoder.sandbox import RunResult, Sandbox
from envs.deepcoder.slots import max_concurrent_sandboxes, set_max_concurrent_sandboxes

SPAN_MARK = "@@span"


def span_program(body: str, sleep_s: float) -> str:
    """`body` after sleeping `sleep_s`; reports "<mark> uid start end" (wall clock) on stderr."""
    return ("import os as _os, sys as _sys, time as _time\n_t0 = _time.time()\n"
            f"_time.sleep({sleep_s})\n{body}\n"
            f"print('{SPAN_MARK}', _os.getuid(), _t0, _time.time(), file=_sys.stderr)\n")


def span_of(run: RunResult) -> tuple[int, float, float]:
    """(uid, start, end) a `span_program` run reported."""
    line = next(line for line in run.stderr.splitlines() if line.startswith(SPAN_MARK))
    _, uid, start, end = line.split()
    return int(uid), float(start), float(end)


def peak_overlap(spans: Sequence[tuple[float, float]]) -> int:
    """The most intervals [start, end] alive at one instant."""
    events = sorted([(s, 1) for s, _ in spans] + [(e, -1) for _, e in spans], key=lambda ev: (ev[0], ev[1]))
    alive = peak = 0
    for _, delta in events:
        alive += delta
        peak = max(peak, alive)
    return peak


def shared_uid_overlaps(spans: Sequence[tuple[int, float, float]]) -> list[tuple]:
    """Pairs of runs that were alive at the same time under the same uid."""
    return [(a, b) for i, a in enumerate(spans) for b in spans[i + 1:]
            if a[0] == b[0] and a[1] < b[2] and b[1] < a[2]]


class RecordingSandbox(Sandbox):
    """A Sandbox that keeps the (uid, start, end) of every `span_program` run it made."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._lock = threading.Lock()
        self.spans: list[tuple[int, float, float]] = []

    def run(self, code: str, stdin: str = "") -> RunResult:
        result = super().run(code, stdin)
        if result.ok:
            with self._lock:
                self.spans.append(span_of(result))
        return result


@contextlib.contextmanager
def concurrent_sandboxes(n: int) -> Iterator[None]:
    """The process-wide bound set to `n` for a block, restored after."""
    before = max_concurrent_sandboxes()
    set_max_concurrent_sandboxes(n)
    try:
        yield
    finally:
        set_max_concurrent_sandboxes(before)
