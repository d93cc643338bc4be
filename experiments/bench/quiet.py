"""Is the machine quiet? What the benchmarks print next to their timings.

The 1-minute load average counts the benchmark's own threads, so after a minute of compiling it reads ~2 on
a 2-core machine even when nothing else runs. What spoils a ratio is CPU time taken by *other* processes while
the timed calls run: `OtherCpu` measures exactly that (all CPU time the kernel accounted, from /proc/stat, less
this process's and its waited-for children's), in cores on average over the block.
"""

from __future__ import annotations

import os
import time

BUSY_CORES = 0.25  # others' average use above this (a quarter of a core) makes a timing untrustworthy


def load_line() -> str:
    """The 1-minute load average, with a warning above 0.5 (only meaningful before the benchmark starts)."""
    load = os.getloadavg()[0]
    warn = "  WARNING: busy machine (load > 0.5), timings are not trustworthy" if load > 0.5 else ""
    return f"1-minute load average {load:.2f}{warn}"


def _busy_seconds() -> float | None:
    """CPU seconds every process on the machine has spent since boot (None off Linux)."""
    try:
        with open("/proc/stat") as f:
            fields = [int(x) for x in f.readline().split()[1:]]
    except OSError:
        return None
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)  # idle + iowait
    return (sum(fields[:8]) - idle) / os.sysconf("SC_CLK_TCK")


def _own_seconds() -> float:
    t = os.times()
    return t.user + t.system + t.children_user + t.children_system


class OtherCpu:
    """`with OtherCpu() as other: ...` then `other.cores`: CPU cores other processes used on average in the block."""

    def __enter__(self) -> "OtherCpu":
        self._busy, self._own, self._wall = _busy_seconds(), _own_seconds(), time.perf_counter()
        self.cores = None
        return self

    def __exit__(self, *exc) -> None:
        busy = _busy_seconds()
        wall = time.perf_counter() - self._wall
        if busy is not None and self._busy is not None and wall > 0:
            self.cores = max(0.0, (busy - self._busy) - (_own_seconds() - self._own)) / wall

    def line(self) -> str:
        """'other processes used N.NN cores during the timed calls', with a warning above BUSY_CORES."""
        if self.cores is None:
            return "other processes' CPU use unknown (no /proc/stat)"
        warn = (f"  WARNING: above {BUSY_CORES} cores, the machine was not quiet and these timings are not "
                "trustworthy" if self.cores > BUSY_CORES else " (quiet)")
        return f"other processes used {self.cores:.2f} cores on average during the timed calls{warn}"
