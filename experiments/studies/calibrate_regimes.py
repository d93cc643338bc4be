"""Calibrate the thresholds of RAGEN-2's four reasoning regimes from runs whose regime is known by construction.

  python experiments/studies/calibrate_regimes.py --config configs/sokoban.py:tiny_reasoning --seeds 0,1 \
      --out runs/regime_calibration [--classify runs/reasoning_ablation/*]

Each arm warm-starts the tiny model on oracle play that thinks in one regime on purpose
(`warmstart.reasoning`): "fixed" (one text for every input: low-entropy collapse), "state" (the env's
description of the state: compressed), "filler" (random words whatever the input: template collapse) and
"state_filler" (the description, then random words: diverse). A few RL steps follow with the diagnostics at
every `--every` steps. The script reads every logged (H(Z|X), MI / log N) point of both samplings, prints
each arm's range, and places each threshold in the middle of the widest gap that best separates the arms
(`ragen_jax.diagnostics.regimes.calibrate`); then it classifies the points of `--classify` runs with the
calibrated thresholds and with the config's defaults. `--json` writes the thresholds and every point.

`--points A.json B.json ...` runs nothing: it calibrates on the union of the points earlier `--json` files hold
(for example one per environment), printing each file's arms:

  python experiments/studies/calibrate_regimes.py --points runs/regime_calibration.json runs/regime_calibration_fl.json \
      --json docs/regime_calibration.json
"""

from __future__ import annotations

import argparse
import collections
import json
import math
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))  # experiments/plot.py
sys.path.insert(1, HERE)
import plot  # noqa: E402
from filter_ablation import run_all  # noqa: E402

from ragen_jax.diagnostics.regimes import DEFAULT_THRESHOLDS, calibrate, classify  # noqa: E402

ARMS = {  # warmstart flags -> the regime the policy is built to sit in
    "fixed": (["--config.warmstart.reasoning=fixed", "--config.warmstart.reasoning_text=push the box"],
              "low_entropy_collapse"),
    "state": (["--config.warmstart.reasoning=state"], "compressed"),
    "filler": (["--config.warmstart.reasoning=filler"], "template_collapse"),
    "state_filler": (["--config.warmstart.reasoning=state_filler"], "diverse"),
}
PREFIXES = ("collapse_first_turn_sample", "collapse_trajectory_sample")


def run_points(run_dir: str) -> list[dict]:
    """Every diagnostics point a run logged: step, sampling, H(Z|X), MI, log N, MI / log N."""
    scalars = plot.read_scalars(run_dir)
    points = []
    for prefix in PREFIXES:
        h, mi, bound = (dict(scalars.get(f"{prefix}/{tag}", [])) for tag in
                        ("conditional_entropy_est", "mi_estimate", "mi_upper_bound"))
        for step in sorted(set(h) & set(mi) & set(bound)):
            if bound[step] > 0:
                points.append(dict(step=step, sampling=prefix, h=h[step], mi=mi[step], bound=bound[step],
                                   mi_rel=mi[step] / bound[step]))
    return points


def _range(values) -> str:
    return f"{min(values):.3f}-{max(values):.3f}" if values else "-"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", default="configs/sokoban.py:tiny_reasoning")
    parser.add_argument("--seeds", default="0,1")
    parser.add_argument("--steps", type=int, default=10, help="RL steps after the warm start")
    parser.add_argument("--every", type=int, default=5, help="diagnostics every N steps (and at step 1)")
    parser.add_argument("--out", default="runs/regime_calibration")
    parser.add_argument("--parallel", type=int, default=1)
    parser.add_argument("--reuse", action="store_true", help="skip runs whose workdir holds a summary.json")
    parser.add_argument("--classify", nargs="*", default=[], help="run folders to classify afterwards")
    parser.add_argument("--json", default="", help="write the thresholds and every point here")
    parser.add_argument("--points", nargs="+", default=[], help="calibrate on these --json files' points; run nothing")
    args, extra = parser.parse_known_args(argv)
    extra = [e for e in extra if e != "--"]
    if args.points:
        return report(load_points(args.points), args.classify, args.json)
    seeds = [int(s) for s in args.seeds.split(",")]
    jobs = []
    for arm, (flags, regime) in ARMS.items():
        for seed in seeds:
            workdir = os.path.join(args.out, f"{arm}_seed{seed}")
            argv_run = [sys.executable, os.path.join(os.path.dirname(os.path.dirname(HERE)), "run.py"), f"--config={args.config}",
                        f"--workdir={workdir}", f"--config.trainer.seed={seed}", f"--config.model.seed={seed}",
                        f"--config.trainer.total_steps={args.steps}", f"--config.diagnostics.every={args.every}",
                        "--config.val.groups=128", f"--config.val.every={args.steps}", *flags, *extra]
            jobs.append((arm, regime, seed, workdir, argv_run))
    run_all([(w, a) for _, _, _, w, a in jobs
             if not (args.reuse and os.path.exists(os.path.join(w, "summary.json")))], args.parallel)

    source = args.config
    records = [dict(p, arm=a, seed=seed, regime=regime, source=source) for a, regime, seed, w, _ in jobs
               for p in run_points(w)]
    return report(records, args.classify, args.json)


def print_arms(records: list[dict], source: str) -> None:
    """One line per arm of `source`: its regime, point count and ranges."""
    print(f"{source}:\n  {'arm':<13} {'built as':<21} {'points':>6} {'H(Z|X) nats/token':>18} {'MI / log N':>12}")
    for arm, (_, regime) in ARMS.items():
        pts = [p for p in records if p["arm"] == arm and p["source"] == source]
        if not pts:
            print(f"  {arm:<13} {regime:<21} no diagnostics logged")
            continue
        print(f"  {arm:<13} {regime:<21} {len(pts):>6} {_range([p['h'] for p in pts]):>18} "
              f"{_range([p['mi_rel'] for p in pts]):>12}")


def load_points(paths: list[str]) -> list[dict]:
    """The points of earlier `--json` files, each tagged with its source (the config it came from, else the file)."""
    records = []
    for path in paths:
        try:
            with open(path) as f:
                data = json.load(f)
        except (OSError, ValueError) as e:
            raise SystemExit(f"--points {path}: cannot read it as JSON ({e}).") from None
        if not isinstance(data, dict) or not isinstance(data.get("points"), list):
            raise SystemExit(f"{path}: not a calibrate_regimes.py --json file (no 'points' list).")
        records.extend(dict(p, source=p.get("source", path)) for p in data["points"])
    return records


def report(records: list[dict], classify_runs: list[str], json_path: str) -> int:
    """Print every source's arms, calibrate on all the points, classify `classify_runs`, write `json_path`."""
    for source in dict.fromkeys(p["source"] for p in records):
        print_arms(records, source)
    labelled = [(p["h"], p["mi_rel"], p["regime"]) for p in records]
    if {label for *_, label in labelled} != {regime for _, regime in ARMS.values()}:
        print("not every arm logged diagnostics: nothing calibrated")
        return 1
    th, quality = calibrate(labelled)
    print(f"calibrated: conditional_entropy={th['conditional_entropy']:.3f} nats/token (accuracy "
          f"{quality['entropy_accuracy']:.3f}, gap x{math.exp(quality['entropy_gap_log']):.1f}); mi={th['mi']:.3f} of "
          f"log N (accuracy {quality['mi_accuracy']:.3f}, gap {quality['mi_gap']:.3f}); points in their arm's regime: "
          f"{quality['accuracy']:.3f} of {quality['points']}")
    defaults, counts, counts_defaults = dict(DEFAULT_THRESHOLDS), collections.Counter(), collections.Counter()
    for path in classify_runs:
        points = run_points(path)
        if not points:
            print(f"{os.path.basename(os.path.normpath(path)):<24} no diagnostics logged in {path} (run it with "
                  "--config.diagnostics.every=N to classify it)")
        for p in points:
            ours = classify(p["h"], p["mi_rel"], th, 1.0)
            old = classify(p["h"], p["mi"], defaults, p["bound"])
            print(f"{os.path.basename(os.path.normpath(path)):<24} step {p['step']:>3} {p['sampling']:<27} "
                  f"H {p['h']:.3f} MI/logN {p['mi_rel']:+.3f}: {ours} (defaults: {old})")
            counts[ours] += 1
            counts_defaults[old] += 1
    if classify_runs:
        print(f"{len(classify_runs)} runs classified: {dict(counts)} (defaults: {dict(counts_defaults)})")
    if json_path:
        with open(json_path, "w") as f:
            json.dump({"thresholds": th, "report": quality, "points": records}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
