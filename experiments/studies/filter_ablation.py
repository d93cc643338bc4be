"""No filter vs RAGEN-2's SNR-adaptive filter (top_p 0.9, linear, include_zero False), several seeds.

  python experiments/studies/filter_ablation.py --config configs/sokoban.py:tiny --seeds 0,1,2 --out runs/ablation

Each (arm, seed) is a run of run.py (its own workdir); the script then prints the final validation
success of each arm as mean +- sample std over seeds (as docs/quickstart.md reports it) and writes curves.png
(validation success and in-group reward std per run). Extra flags after `--` go to every run.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))  # experiments/plot.py
sys.path.insert(1, HERE)
import plot  # noqa: E402

ARMS = {
    "no_filter": ["--config.filter.strategy=top_p", "--config.filter.value=1.0", "--config.filter.include_zero=True"],
    "top_p_0.9": ["--config.filter.strategy=top_p", "--config.filter.value=0.9", "--config.filter.include_zero=False"],
}


def run_all(jobs: list[tuple[str, list[str]]], parallel: int) -> dict[str, int]:
    """Run (workdir, argv) jobs, `parallel` at a time, each logging to workdir/log.txt -> {workdir: exit code}."""
    pending, active, codes = list(jobs), [], {}
    while pending or active:
        while pending and len(active) < max(parallel, 1):
            workdir, argv = pending.pop(0)
            os.makedirs(workdir, exist_ok=True)
            log = open(os.path.join(workdir, "log.txt"), "w")
            active.append((workdir, subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT), log))
        time.sleep(1.0)
        for workdir, proc, log in list(active):
            if proc.poll() is not None:
                log.close()
                codes[workdir] = proc.returncode
                active.remove((workdir, proc, log))
    return codes


def arm_line(finals: dict[str, list[float]]) -> str:
    """Each arm's final validation success over seeds: mean +- sample std (ddof 1; "-" for a single seed)."""
    line = []
    for arm, values in finals.items():
        if values:
            std = f"{np.std(values, ddof=1):.3f}" if len(values) > 1 else "-"
            line.append(f"{arm}: {np.mean(values):.3f} +- {std} (n={len(values)})")
    return "final validation success, mean +- sample std  " + " | ".join(line)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", default="configs/sokoban.py:tiny")
    parser.add_argument("--seeds", default="0,1,2")
    parser.add_argument("--out", default="runs/filter_ablation")
    parser.add_argument("--parallel", type=int, default=1)
    parser.add_argument("--reuse", action="store_true",
                        help="skip (arm, seed) runs whose workdir already holds a summary.json")
    args, extra = parser.parse_known_args(argv)
    extra = [e for e in extra if e != "--"]
    seeds = [int(s) for s in args.seeds.split(",")]
    jobs = []
    for arm, flags in ARMS.items():
        for seed in seeds:
            workdir = os.path.join(args.out, f"{arm}_seed{seed}")
            argv = [sys.executable, os.path.join(os.path.dirname(os.path.dirname(HERE)), "run.py"), f"--config={args.config}",
                    f"--workdir={workdir}", f"--config.trainer.seed={seed}", f"--config.model.seed={seed}",
                    *flags, *extra]
            jobs.append((arm, seed, workdir, argv))
    todo = [(workdir, argv) for _, _, workdir, argv in jobs
            if not (args.reuse and os.path.exists(os.path.join(workdir, "summary.json")))]
    codes = run_all(todo, args.parallel)
    finals: dict[str, list[float]] = {arm: [] for arm in ARMS}
    failed = []
    for arm, seed, workdir, _ in jobs:
        path = os.path.join(workdir, "summary.json")
        if codes.get(workdir, 0) != 0 or not os.path.exists(path):  # a failed run may leave an earlier summary
            how = f"exit code {codes[workdir]}" if codes.get(workdir, 0) else "no summary.json"
            print(f"{arm} seed {seed}: FAILED ({how}; see {workdir}/log.txt)")
            failed.append(f"{arm} seed {seed}")
            continue
        with open(path) as f:
            summary = json.load(f)
        finals[arm].append(summary["val_success_final"])
        print(f"{arm} seed {seed}: start {summary['val_success_start']:.3f} final {summary['val_success_final']:.3f} "
              f"best {summary['val_success_best']:.3f}")
    png = plot.plot_runs([j[2] for j in jobs], os.path.join(args.out, "curves.png"),
                         {"validation success": ["val/*/success"],
                          "in-group reward std": ["rollout/in_group_reward_std"],
                          "filter kept ratio": ["rollout/filter_kept_ratio"]})
    print(f"plot: {png}")
    print(arm_line(finals))
    if failed:
        print(f"{len(failed)} of {len(jobs)} runs failed ({', '.join(failed)}): the line above leaves them out")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
