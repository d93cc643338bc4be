"""experiments/bench/peak_memory.py: a call's own peak, even after the process peaked higher."""

import numpy as np

from experiments.bench.peak_memory import peak_growth_bytes


def test_a_calls_peak_shows_after_a_bigger_earlier_one():
    big = np.ones(400 * 2**20 // 8)  # 400 MiB touched, then freed: the process's maxrss stays above it
    del big

    def call():
        small = np.ones(150 * 2**20 // 8)  # 150 MiB touched inside the call
        return float(small[-1])

    grown = peak_growth_bytes(call)
    assert 120 * 2**20 < grown < 300 * 2**20, grown / 2**20
    assert peak_growth_bytes(lambda: None) < 50 * 2**20
