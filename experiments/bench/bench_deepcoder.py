"""DeepCoder grading throughput: tests/s at batch 8 vs 128, and 1 vs 4 tests at once per episode.

Every configuration grades the same `--episodes` DeepCoder episodes (built-in problems, answered with
their reference solutions, which must all pass) through HostEnvBatch, in consecutive batches of the
configuration's size; the process-wide sandbox bound is the same for all. Configurations are
interleaved and repeated; the median is reported, with the ratios of tests/s batch 128 / batch 8 and 4 / 1
(above 1: the first is faster), the load at the start and the CPU other processes used meanwhile.
Usage: python experiments/bench/bench_deepcoder.py [--episodes 128] [--repeats 3]
    [--max-concurrent-sandboxes N]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

import numpy as np  # noqa: E402

from envs.batch import HostEnvBatch  # noqa: E402
from envs.deepcoder.env import DeepCoderEnv  # noqa: E402
from envs.deepcoder.slots import max_concurrent_sandboxes, set_max_concurrent_sandboxes  # noqa: E402
from experiments.bench.quiet import OtherCpu, load_line  # noqa: E402

BATCHES = (8, 128)
TESTS_AT_ONCE = (1, 4)


def grade_episodes(batch: HostEnvBatch, episodes: int) -> tuple[int, float]:
    """(tests run, seconds) to grade `episodes` reference answers, `batch.batch_size` at a time."""
    size = batch.batch_size
    tests, start = 0, time.perf_counter()
    for first in range(0, episodes, size):
        seeds = [first + i for i in range(size)]
        active = np.array([seed < episodes for seed in seeds])
        batch.reset(seeds)
        answers = [[f"```python\n{env.problem.solution}\n```"] for env in batch.envs]
        result = batch.step(answers, active)
        failed = [(env.problem.problem_id, err or info.get("feedback"))
                  for env, ok, err, info, on in zip(batch.envs, result.success, result.errors, result.infos, active)
                  if on and not ok]
        if failed:
            raise RuntimeError(f"reference solutions failed: {failed[:3]}")
        tests += sum(len(env.problem.tests) for env, on in zip(batch.envs, active) if on)
    return tests, time.perf_counter() - start


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--episodes", type=int, default=128, help="episodes graded per configuration and repeat")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--max-concurrent-sandboxes", type=int, default=None,
                        help="process-wide bound on sandboxes alive at once (default: slots.default_capacity())")
    args = parser.parse_args(argv)
    if args.max_concurrent_sandboxes is not None:
        set_max_concurrent_sandboxes(args.max_concurrent_sandboxes)
    configs = [(b, k) for b in BATCHES for k in TESTS_AT_ONCE]
    batches = {(b, k): HostEnvBatch([DeepCoderEnv(max_concurrency=k) for _ in range(b)]) for b, k in configs}
    caps = batches[configs[0]].envs[0].sandbox.capabilities()
    print(f"cpus={len(os.sched_getaffinity(0))} max_concurrent_sandboxes={max_concurrent_sandboxes()} "
          f"episodes={args.episodes} repeats={args.repeats} pidns={caps['pidns']} root={caps['root']} "
          f"uid_switch={caps['uid'] is not None}; at the start: {load_line()}", flush=True)
    rates: dict[tuple[int, int], list[float]] = {c: [] for c in configs}
    with OtherCpu() as other:  # the sandboxes are this process's children, waited for: not counted as others
        for _ in range(args.repeats):
            for config in configs:  # interleaved, so load drifts hit every configuration alike
                tests, seconds = grade_episodes(batches[config], args.episodes)
                rates[config].append(tests / seconds)
    print(other.line())
    median = {c: statistics.median(r) for c, r in rates.items()}
    print(f"{'batch':>6} {'tests at once':>14} {'tests/s (median)':>17}  all repeats")
    for (b, k), rate in median.items():
        print(f"{b:>6} {k:>14} {rate:>17.1f}  {' '.join(f'{r:.1f}' for r in rates[(b, k)])}")
    print("ratios of tests/s (above 1: the first is faster):")
    for k in TESTS_AT_ONCE:
        print(f"batch {BATCHES[1]} / batch {BATCHES[0]} at {k} test(s) at once: "
              f"{median[(BATCHES[1], k)] / median[(BATCHES[0], k)]:.2f}x")
    for b in BATCHES:
        print(f"{TESTS_AT_ONCE[1]} / {TESTS_AT_ONCE[0]} tests at once at batch {b}: "
              f"{median[(b, TESTS_AT_ONCE[1])] / median[(b, TESTS_AT_ONCE[0])]:.2f}x")


if __name__ == "__main__":
    main()
