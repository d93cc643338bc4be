"""Peak resident memory a call adds: what the benchmarks report for the PyTorch side.

A process's peak RSS (getrusage's maxrss, /proc's VmHWM) only grows, so a call made after something bigger (loading
a model's weights, a larger earlier call) shows no growth at all. On Linux the peak can be reset: writing "5" to
/proc/self/clear_refs sets VmHWM back to the current RSS, so the peak read after the call is the call's own.
Elsewhere (or without /proc) the maxrss difference is the fallback, and may read 0.
"""

from __future__ import annotations

import resource
from typing import Callable


def _status_kib(field: str) -> int | None:
    """A `field:  N kB` line of /proc/self/status, in KiB (None without /proc)."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1])
    except OSError:
        return None
    return None


def peak_growth_bytes(call: Callable[[], object]) -> int:
    """Bytes by which the resident set's peak during call() exceeds the resident set just before it."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")  # VmHWM := VmRSS
        before = _status_kib("VmRSS")
    except OSError:
        before = None
    if before is None:
        start = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        call()
        return (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - start) * 1024  # KiB on Linux
    call()
    return max(0, (_status_kib("VmHWM") or before) - before) * 1024
