"""Run a grid of flag overrides, one workdir per run, comparable in one TensorBoard.

  python experiments/sweep.py --config configs/sokoban.py:tiny --root runs/sweep \
      --grid filter.value=1.0,0.9 --grid trainer.seed=0,1,2 --parallel 2 \
      -- --config.trainer.total_steps=20

Each run is `python run.py --config CONFIG --config.KEY=VALUE ... --workdir ROOT/KEY=VALUE,...`;
then `tensorboard --logdir ROOT` shows them side by side. A run's log is ROOT/<name>/log.txt.
"""

from __future__ import annotations

import argparse
import itertools
import os
import subprocess
import sys
import time

RUN_PY = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "run.py")


def parse_grid(items: list[str]) -> list[tuple[str, list[str]]]:
    """["a.b=1,2", "c=x"] -> [("a.b", ["1", "2"]), ("c", ["x"])]."""
    grid = []
    for item in items:
        key, sep, values = item.partition("=")
        if not sep or not key or not values:
            raise SystemExit(f"--grid takes KEY=V1,V2,...; got {item!r}")
        grid.append((key.strip(), [v.strip() for v in values.split(",")]))
    return grid


def run_commands(config: str, root: str, grid, extra: list[str]) -> list[tuple[str, list[str]]]:
    """(run name, argv) for every point of the grid."""
    keys = [k for k, _ in grid]
    runs = []
    for values in itertools.product(*[v for _, v in grid]):
        name = ",".join(f"{k}={v}" for k, v in zip(keys, values)) or "default"
        argv = [sys.executable, RUN_PY, f"--config={config}", f"--workdir={os.path.join(root, name)}"]
        argv += [f"--config.{k}={v}" for k, v in zip(keys, values)] + list(extra)
        runs.append((name, argv))
    return runs


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", required=True)
    parser.add_argument("--root", default="runs/sweep")
    parser.add_argument("--grid", action="append", default=[], help="KEY=V1,V2,... (repeatable)")
    parser.add_argument("--parallel", type=int, default=1, help="runs at a time")
    parser.add_argument("--dry-run", action="store_true")
    args, extra = parser.parse_known_args()
    extra = [e for e in extra if e != "--"]
    runs = run_commands(args.config, args.root, parse_grid(args.grid), extra)
    if args.dry_run:
        for name, argv in runs:
            print(name, " ".join(argv))
        return 0
    pending, active, failed = list(runs), [], []
    while pending or active:
        while pending and len(active) < max(args.parallel, 1):
            name, argv = pending.pop(0)
            os.makedirs(os.path.join(args.root, name), exist_ok=True)
            log = open(os.path.join(args.root, name, "log.txt"), "w")
            active.append((name, subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT), log))
            print(f"started {name}", flush=True)
        time.sleep(1.0)
        for entry in list(active):
            name, proc, log = entry
            if proc.poll() is not None:
                log.close()
                active.remove(entry)
                print(f"finished {name}: exit {proc.returncode}", flush=True)
                if proc.returncode:
                    failed.append(name)
    print(f"{len(runs) - len(failed)}/{len(runs)} runs succeeded; tensorboard --logdir {args.root}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
