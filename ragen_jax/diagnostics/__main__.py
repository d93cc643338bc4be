"""`python -m ragen_jax.diagnostics ROLLOUTS --checkpoint DIR`: collapse report for saved rollouts."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Sequence

from ragen_jax.diagnostics.collapse import FIRST_TURN, TRAJECTORY
from ragen_jax.diagnostics.regimes import REGIMES


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m ragen_jax.diagnostics", description=__doc__)
    p.add_argument("rollouts", help="rollout dump: .jsonl (one trajectory per line) or .pkl")
    p.add_argument("--checkpoint", required=True, help="Hugging Face model folder (the policy)")
    p.add_argument("--num-samples", type=int, default=64, help="pairs per sampling (0 = all)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--batch-size", type=int, default=16, help="(reasoning, prompt) pairs per call")
    p.add_argument("--sampling", choices=("both", "first_turn", "trajectory"), default="both")
    p.add_argument("--h-threshold", type=float, default=None, help="H(Z|X) regime threshold")
    p.add_argument("--mi-threshold", type=float, default=None, help="MI regime threshold")
    p.add_argument("--mi-relative", action="store_true", help="MI threshold as a fraction of log N")
    p.add_argument("--out", default=None, help="also write all metrics to this JSON file")
    return p


def _summary(metrics: dict[str, float]) -> str:
    lines = []
    for prefix in (FIRST_TURN, TRAJECTORY):
        if f"{prefix}/mi_estimate" not in metrics:
            continue
        g = lambda k: metrics[f"{prefix}/{k}"]  # noqa: E731
        lines += [
            f"[{prefix}] {int(g('num_samples'))} pairs x {int(g('num_prompts'))} prompts",
            f"  MI estimate        {g('mi_estimate'):.4f} nats (bound log N = {g('mi_upper_bound'):.4f})",
            f"  H(Z|X) estimate    {g('conditional_entropy_est'):.4f} nats/token"
            f"   H(Z) {g('reasoning_entropy_est'):.4f}",
            f"  retrieval@1        {g('retrieval_accuracy'):.3f} (chance {g('retrieval_chance_level'):.3f})"
            f"   @8 {g('retrieval_accuracy@8'):.3f} (chance {g('retrieval_chance_level@8'):.3f})",
            f"  MI z-score         {g('mi_zscore'):.3f}   seq MI {g('mi_seq_estimate'):.3f}",
            f"  regime             {REGIMES[int(g('regime'))]}",
        ]
    for key in ("timing_s/collapse_first_turn_step", "timing_s/collapse_multi_turn_step"):
        if key in metrics:
            lines.append(f"{key}: {metrics[key]:.2f} s")
    return "\n".join(lines) if lines else "No sampling had two or more prompts with reasoning."


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    from ragen_jax.diagnostics.offline import offline_report

    thresholds = {}
    if args.h_threshold is not None:
        thresholds["conditional_entropy"] = args.h_threshold
    if args.mi_threshold is not None:
        thresholds["mi"] = args.mi_threshold
    if args.mi_relative:
        thresholds["mi_relative"] = True
    metrics = offline_report(
        args.rollouts, args.checkpoint, num_samples=args.num_samples or None, seed=args.seed,
        batch_size=args.batch_size, sampling=args.sampling, thresholds=thresholds,
    )
    print(_summary(metrics))
    if args.out:
        with open(args.out, "w") as f:
            json.dump(metrics, f, indent=2, sort_keys=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
