"""The picture in docs/diagnostics.md: the offline CLI's printed report beside the regime plane.

  python run.py --config configs/bandit.py:tiny --config.trainer.total_steps=2 \\
      --config.trainer.dump_rollouts_every=1 --config.diagnostics.every=1 --config.warmstart.steps=40 \\
      --config.warmstart.reasoning_text="pick the arm that pays more" --config.rollout.response_length=32 \\
      --workdir runs/diag
  python experiments/studies/diagnostics_example.py runs/diag/rollouts/train_step2.jsonl --checkpoint runs/diag \\
      --step 2 --out docs/img/diagnostics_example.png

The plane shows the run's own path (its logged first-turn H(Z|X) and MI per diagnostics step, read
from the run's TensorBoard files) when --checkpoint is a run folder, else the report's point, with the run
folder's regime thresholds. Responses that think nothing leave nothing to draw: one error line says so.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import logging
import os
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
from ragen_jax.diagnostics import FIRST_TURN  # noqa: E402
from ragen_jax.diagnostics.__main__ import main as diagnostics_main  # noqa: E402
from ragen_jax.diagnostics.offline import run_settings  # noqa: E402
from ragen_jax.diagnostics.plots import regime_plane_image  # noqa: E402


def run_path(run_dir: str) -> tuple[list[int], list[float], list[float]]:
    """(steps, H(Z|X), MI) of the first-turn sampling as the run logged them ([] when there is no tb/)."""
    from tensorboard.backend.event_processing.event_accumulator import SCALARS, EventAccumulator

    tb = os.path.join(run_dir, "tb")
    if not os.path.isdir(tb):
        return [], [], []
    acc = EventAccumulator(tb, size_guidance={SCALARS: 0})
    acc.Reload()
    tags = acc.Tags()[SCALARS]
    h_tag, mi_tag = f"{FIRST_TURN}/conditional_entropy_est", f"{FIRST_TURN}/mi_estimate"
    if h_tag not in tags or mi_tag not in tags:
        return [], [], []
    h = {e.step: e.value for e in acc.Scalars(h_tag)}
    mi = {e.step: e.value for e in acc.Scalars(mi_tag)}
    steps = sorted(set(h) & set(mi))
    return steps, [h[s] for s in steps], [mi[s] for s in steps]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("rollouts")
    parser.add_argument("--checkpoint", required=True)
    parser.add_argument("--step", type=int, default=None)
    parser.add_argument("--out", default="docs/img/diagnostics_example.png")
    args = parser.parse_args(argv)
    report_json = args.out + ".json"
    cli = [args.rollouts, "--checkpoint", args.checkpoint]
    cli += ["--step", str(args.step)] if args.step is not None else []
    printed = io.StringIO()
    handler = logging.StreamHandler(printed)  # the CLI's "policy: ..." and "rollouts: ..." lines, printed once below
    cli_logger = logging.getLogger("ragen_jax.diagnostics")
    cli_logger.addHandler(handler)
    cli_logger.propagate = False  # not also to the terminal through the root handler
    try:
        with contextlib.redirect_stdout(printed):
            rc = diagnostics_main([*cli, "--out", report_json])
    finally:
        cli_logger.removeHandler(handler)
        cli_logger.propagate = True
    if rc:
        return rc
    with open(report_json) as f:
        metrics = json.load(f)
    os.remove(report_json)
    steps, h, mi = run_path(args.checkpoint)
    if not steps:
        if f"{FIRST_TURN}/mi_estimate" not in metrics:
            print(f"diagnostics_example.py: error: no first-turn (prompt, reasoning) pairs in {args.rollouts} and no "
                  f"logged {FIRST_TURN}/mi_estimate under {args.checkpoint}: nothing to draw (the responses think "
                  "nothing; warm-start with --config.warmstart.reasoning_text=... or use a :tiny_reasoning config, and "
                  "turn on --config.diagnostics.every=1).", file=sys.stderr)
            return 2
        steps, h, mi = [args.step or 0], [metrics[f"{FIRST_TURN}/conditional_entropy_est"]], [
            metrics[f"{FIRST_TURN}/mi_estimate"]]
    plane = regime_plane_image(h, mi, steps, thresholds=run_settings(args.checkpoint).get("thresholds"),
                               mi_upper_bound=metrics.get(f"{FIRST_TURN}/mi_upper_bound"))
    text = "$ python -m ragen_jax.diagnostics " + " ".join(cli) + "\n" + printed.getvalue().rstrip()
    fig, (left, right) = plt.subplots(1, 2, figsize=(13, 4.6), gridspec_kw={"width_ratios": [1.2, 1]})
    left.axis("off")
    left.text(0, 1, text, family="monospace", fontsize=8, va="top", ha="left", transform=left.transAxes)
    right.imshow(plane)
    right.axis("off")
    fig.tight_layout()
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    fig.savefig(args.out, dpi=100)
    print(printed.getvalue().rstrip())
    print(args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
