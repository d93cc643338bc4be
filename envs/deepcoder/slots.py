"""Process-wide sandbox slots: a bound on sandboxes alive at once, and a uid no other live sandbox holds.

Every sandboxed run, from every `Sandbox` and thread of this process, holds one slot from before its
launcher starts until its last process is gone. Slot k runs as uid `uid_of(k)`, taken from a block of
`MAX_SLOTS` uids keyed by this process's pid, so two live processes never share a uid either. Waiters
are served first come, first served, so a run's wait is bounded by the runs queued ahead of it.
The bound is `max_concurrent_sandboxes()`; change it with `set_max_concurrent_sandboxes(n)`.
"""

from __future__ import annotations

import collections
import contextlib
import heapq
import os
import threading
from typing import Iterator

MAX_SLOTS = 512  # uids per process: 1e9 + pid_max (2**22) * 512 stays below the largest uid (2**32 - 2)
_FIRST_UID = 1_000_000_000


def default_capacity() -> int:
    """Two sandboxes per CPU this process may run on (a run is mostly interpreter start-up), at least 4."""
    return min(MAX_SLOTS, max(4, 2 * len(os.sched_getaffinity(0))))


def uid_of(slot: int) -> int:
    """The uid a run in `slot` switches to: unique per (live process, slot)."""
    if not 0 <= slot < MAX_SLOTS:
        raise ValueError(f"slot must be in [0, {MAX_SLOTS}), got {slot}")
    return _FIRST_UID + os.getpid() * MAX_SLOTS + slot


class _Waiter:
    __slots__ = ("event", "slot")

    def __init__(self) -> None:
        self.event = threading.Event()
        self.slot: int | None = None


class SlotPool:
    """At most `capacity` slots held at once; each held slot has exactly one holder. Thread-safe, FIFO."""

    def __init__(self, capacity: int):
        self._lock = threading.Lock()
        self._capacity = 0
        self._free: list[int] = []  # a heap: the lowest free slot is handed out first
        self._held: set[int] = set()
        self._waiters: collections.deque[_Waiter] = collections.deque()
        self.set_capacity(capacity)

    @property
    def capacity(self) -> int:
        return self._capacity

    def held(self) -> frozenset[int]:
        """The slots held right now (a snapshot)."""
        with self._lock:
            return frozenset(self._held)

    def queued(self) -> int:
        """How many callers are waiting for a slot right now."""
        with self._lock:
            return len(self._waiters)

    def set_capacity(self, capacity: int) -> None:
        """Change the bound; slots beyond a lowered bound retire when their holders release them."""
        if isinstance(capacity, bool) or not isinstance(capacity, int) or not 1 <= capacity <= MAX_SLOTS:
            raise ValueError(f"the number of concurrent sandboxes must be an int in [1, {MAX_SLOTS}], got {capacity!r}")
        with self._lock:
            old, self._capacity = self._capacity, capacity
            if capacity > old:
                for slot in range(old, capacity):
                    if slot not in self._held:
                        heapq.heappush(self._free, slot)
            else:
                self._free = [s for s in self._free if s < capacity]
                heapq.heapify(self._free)
            self._serve()

    def acquire(self) -> int:
        """A free slot, waiting in line for one when all are held."""
        with self._lock:
            if self._free and not self._waiters:
                return self._take()
            waiter = _Waiter()
            self._waiters.append(waiter)
        try:
            waiter.event.wait()
        except BaseException:  # interrupted in line: leave it, or give back a slot handed over meanwhile
            with self._lock:
                if waiter.slot is None:
                    self._waiters.remove(waiter)
                else:
                    self._put_back(waiter.slot)
            raise
        assert waiter.slot is not None
        return waiter.slot

    def release(self, slot: int) -> None:
        with self._lock:
            if slot not in self._held:
                raise ValueError(f"slot {slot} is not held")
            self._put_back(slot)

    @contextlib.contextmanager
    def slot(self) -> Iterator[int]:
        """Hold a slot for the body of a `with`, released on every way out."""
        slot = self.acquire()
        try:
            yield slot
        finally:
            self.release(slot)

    def _take(self) -> int:
        slot = heapq.heappop(self._free)
        self._held.add(slot)
        return slot

    def _put_back(self, slot: int) -> None:
        self._held.discard(slot)
        if slot < self._capacity:
            heapq.heappush(self._free, slot)
        self._serve()

    def _serve(self) -> None:
        while self._free and self._waiters:
            waiter = self._waiters.popleft()
            waiter.slot = self._take()
            waiter.event.set()

    def _reset_after_fork(self) -> None:
        """A forked child has none of its parent's runs (and a uid block of its own): start empty."""
        self._lock = threading.Lock()
        self._held.clear()
        self._waiters.clear()
        self._free = list(range(self._capacity))


POOL = SlotPool(default_capacity())
os.register_at_fork(after_in_child=POOL._reset_after_fork)


def max_concurrent_sandboxes() -> int:
    """The process-wide bound on sandboxed runs alive at once (all envs and threads together)."""
    return POOL.capacity


def set_max_concurrent_sandboxes(n: int) -> None:
    """Set the process-wide bound on sandboxed runs alive at once (1..MAX_SLOTS)."""
    POOL.set_capacity(n)
