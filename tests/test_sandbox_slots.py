"""The process-wide sandbox slot pool: one holder per slot, the bound, FIFO service, bound changes."""

import os
import threading
import time

import pytest

from envs.deepcoder.slots import MAX_SLOTS, SlotPool, uid_of

pytestmark = pytest.mark.timeout(60)


def wait_until(predicate, timeout_s=10.0):
    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < deadline, "condition not reached"
        time.sleep(0.002)


def test_each_slot_has_one_holder_and_the_bound_is_reached():
    pool = SlotPool(3)
    lock = threading.Lock()
    holders: dict[int, int] = {}
    peak = [0]
    errors = []

    def worker(name):
        for _ in range(40):
            with pool.slot() as slot:
                with lock:
                    if slot in holders:
                        errors.append((slot, holders[slot], name))
                    holders[slot] = name
                    peak[0] = max(peak[0], len(holders))
                time.sleep(0.001)
                with lock:
                    del holders[slot]

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert peak[0] == 3
    assert pool.held() == frozenset()


def test_waiters_are_served_first_come_first_served():
    pool = SlotPool(1)
    first = pool.acquire()
    order = []

    def waiter(name):
        with pool.slot():
            order.append(name)

    threads = []
    for name in range(5):
        threads.append(threading.Thread(target=waiter, args=(name,)))
        threads[-1].start()
        wait_until(lambda: pool.queued() == name + 1)
    pool.release(first)
    for t in threads:
        t.join()
    assert order == [0, 1, 2, 3, 4]


def test_slot_released_when_the_body_raises():
    pool = SlotPool(1)
    with pytest.raises(RuntimeError):
        with pool.slot():
            raise RuntimeError("boom")
    assert pool.held() == frozenset()
    assert pool.acquire() == 0


def test_lowering_the_bound_retires_slots_and_raising_it_never_reissues_a_held_one():
    pool = SlotPool(2)
    a, b = pool.acquire(), pool.acquire()
    pool.set_capacity(1)
    pool.release(b)  # above the new bound: retired
    got = []
    t = threading.Thread(target=lambda: got.append(pool.acquire()))
    t.start()
    wait_until(lambda: pool.queued() == 1)
    pool.set_capacity(3)  # slot `a` is still held: only new slots are free
    t.join(timeout=5)
    assert got and got[0] != a
    assert pool.acquire() not in (a, got[0])
    assert len(pool.held()) == 3


def test_bad_bounds_and_releases_are_refused():
    with pytest.raises(ValueError, match="int in"):
        SlotPool(0)
    with pytest.raises(ValueError, match="int in"):
        SlotPool(MAX_SLOTS + 1)
    with pytest.raises(ValueError, match="not held"):
        SlotPool(2).release(1)


def test_uid_blocks_of_live_processes_are_disjoint_and_valid(monkeypatch):
    assert len({uid_of(s) for s in range(MAX_SLOTS)}) == MAX_SLOTS
    monkeypatch.setattr(os, "getpid", lambda: 1000)
    last_of_one_process = uid_of(MAX_SLOTS - 1)
    monkeypatch.setattr(os, "getpid", lambda: 1001)
    assert last_of_one_process < uid_of(0)
    monkeypatch.setattr(os, "getpid", lambda: 1 << 22)  # the largest pid_max Linux allows
    assert uid_of(MAX_SLOTS - 1) < 2**32 - 1  # (uid_t)-1 means "no uid"
    with pytest.raises(ValueError, match="slot must be"):
        uid_of(MAX_SLOTS)
