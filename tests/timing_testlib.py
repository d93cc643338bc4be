"""Timing checks that hold on a loaded 2-core machine.

"Fast" means "no pathological (e.g. regex backtracking) cost": CPU seconds this process spent (time.process_time,
which other jobs on the machine barely change, unlike wall time) under a generous budget.
"""

import time

CPU_BUDGET_S = 3.0  # pure-Python work that takes milliseconds; backtracking blow-ups take far longer


def cpu_seconds(fn, *args, **kwargs):
    """(fn(*args, **kwargs), CPU seconds it took in this process)."""
    start = time.process_time()
    out = fn(*args, **kwargs)
    return out, time.process_time() - start
