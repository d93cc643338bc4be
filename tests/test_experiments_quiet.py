"""experiments/bench/quiet.py counts the CPU other processes take while a benchmark times itself."""

import subprocess
import sys
import time

from experiments.bench.quiet import BUSY_CORES, OtherCpu


def test_a_busy_neighbour_is_seen():
    spin = "import time\nt = time.time()\nwhile time.time() - t < 1.5: pass"
    neighbour = subprocess.Popen([sys.executable, "-c", spin])
    with OtherCpu() as other:
        time.sleep(1.2)  # the neighbour spins on a core meanwhile; not yet waited for, so not ours
    neighbour.wait()
    assert other.cores is not None and other.cores > 0.6, other.cores
    assert "WARNING" in other.line() and f"{other.cores:.2f} cores" in other.line()
    assert other.cores > BUSY_CORES
