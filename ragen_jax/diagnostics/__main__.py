"""`python -m ragen_jax.diagnostics ROLLOUTS --checkpoint DIR`: reasoning-collapse report for saved rollouts.

ROLLOUTS: `rollouts.pkl` of `run.py --mode=eval` (exact sampled tokens, as the trainer scores them) or a
JSONL dump (its recorded response tokens; text re-tokenized where it has none). DIR: a Hugging Face model
folder, or a run folder (its hf_export/, else its latest checkpoint); a run folder also gives the run's
diagnostics settings (pairs, samplings, thresholds) unless flags override them. `--step N` draws the pairs as
the trainer does at step N.
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import os
import sys
from typing import Sequence

from ragen_jax.diagnostics.collapse import FIRST_TURN, TRAJECTORY
from ragen_jax.diagnostics.regimes import REGIMES

DEFAULTS = {"num_samples": 64, "sampling": "both", "std_eps": 1e-3}


def _number(kind: type, lowest: float, inclusive: bool = True):
    """An argparse type: `kind` (int or float) at least `lowest` (above it when not inclusive), so a bad flag is
    refused before the model loads."""
    def parse(text: str):
        try:
            value = kind(text)
        except ValueError:
            what = "an integer" if kind is int else "a number"
            raise argparse.ArgumentTypeError(f"{text!r} is not {what}") from None
        if not (value >= lowest if inclusive else value > lowest) or value != value:
            raise argparse.ArgumentTypeError(f"must be {'>=' if inclusive else '>'} {lowest:g}, got {text}")
        return value
    return parse


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m ragen_jax.diagnostics", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("rollouts", help="rollout dump: rollouts.pkl (played episodes) or .jsonl (one trajectory per line)")
    p.add_argument("--checkpoint", required=True,
                   help="Hugging Face model folder, or a run folder (hf_export/, else its latest checkpoint)")
    p.add_argument("--step", type=int, default=None,
                   help="draw the pairs with the trainer's generator of this step (the step TensorBoard shows)")
    p.add_argument("--num-samples", type=_number(int, 0), default=None,
                   help="pairs per sampling, 0 = all (default: the run's diagnostics.max_pairs, else 64)")
    p.add_argument("--seed", type=int, default=0, help="pair-drawing seed when --step is not given")
    p.add_argument("--batch-size", type=_number(int, 1), default=16, help="(reasoning, prompt) pairs per call")
    p.add_argument("--sampling", choices=("both", "first_turn", "trajectory"), default=None,
                   help="default: the run's diagnostics.first_turn / trajectory, else both")
    p.add_argument("--temperature", type=_number(float, 0, inclusive=False), default=None,
                   help="divide the logits by this when scoring (default: the run folder's rollout temperature, "
                        "else 1)")
    p.add_argument("--h-threshold", type=float, default=None, help="H(Z|X) regime threshold")
    p.add_argument("--mi-threshold", type=float, default=None, help="MI regime threshold")
    p.add_argument("--mi-relative", action=argparse.BooleanOptionalAction, default=None,
                   help="MI threshold as a fraction of log N (the default) or, with --no-mi-relative, in nats")
    p.add_argument("--std-eps", type=_number(float, 0, inclusive=False), default=None,
                   help="eps of the MI z-score, gap / (std + eps) (default: the run's diagnostics.std_eps, else 1e-3)")
    p.add_argument("--out", default=None, help="also write all metrics to this JSON file")
    return p


def _regime_name(index: float) -> str:
    return REGIMES[int(index)] if math.isfinite(index) else "undefined (H(Z|X) or MI is not finite: NaN log-probs?)"


def summary(metrics: dict[str, float]) -> str:
    """The printed report: per sampling, MI, H(Z|X), retrieval, z-score and regime."""
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
            f"  retrieval_at_1     {g('retrieval_accuracy'):.3f} (chance {g('retrieval_chance_level'):.3f})"
            f"   _at_8 {g('retrieval_accuracy_at_8'):.3f} (chance {g('retrieval_chance_level_at_8'):.3f})",
            f"  MI z-score         {g('mi_zscore'):.3f}   seq MI {g('mi_seq_estimate'):.3f}",
            f"  regime             {_regime_name(g('regime'))}",
        ]
    if not lines:
        return ("No sampling had two or more prompts with reasoning: the responses' <think> parts are empty or the "
                "episodes share one prompt. A run that reasons (e.g. configs/sokoban.py:tiny_reasoning, see "
                "docs/diagnostics.md) gives the diagnostics something to measure.")
    for key in ("timing_s/collapse_first_turn_step", "timing_s/collapse_multi_turn_step"):
        if key in metrics:
            lines.append(f"{key}: {metrics[key]:.2f} s")
    return "\n".join(lines)


def settings_from(args: argparse.Namespace) -> dict:
    """offline_report's num_samples / sampling / thresholds / temperature / std_eps: flags, else the run folder's
    config, else defaults."""
    from ragen_jax.diagnostics.offline import run_settings

    run = run_settings(args.checkpoint)
    thresholds = dict(run.get("thresholds", {}))
    for key, value in (("conditional_entropy", args.h_threshold), ("mi", args.mi_threshold),
                       ("mi_relative", args.mi_relative)):
        if value is not None:
            thresholds[key] = value
    num_samples = args.num_samples if args.num_samples is not None else run.get("num_samples",
                                                                                 DEFAULTS["num_samples"])
    temperature = args.temperature if args.temperature is not None else run.get("temperature", 1.0)
    std_eps = args.std_eps if args.std_eps is not None else run.get("std_eps", DEFAULTS["std_eps"])
    return {"num_samples": num_samples or None, "sampling": args.sampling or run.get("sampling", DEFAULTS["sampling"]),
            "thresholds": thresholds, "temperature": temperature, "std_eps": std_eps}


def check_out(out: str, rollouts: str) -> None:
    """Before any work: --out must be a writable file path that is not the rollout dump (writing the report
    there would replace the rollouts), in a folder that exists (created if missing)."""
    same = os.path.abspath(out) == os.path.abspath(rollouts) or (
        os.path.exists(out) and os.path.exists(rollouts) and os.path.samefile(out, rollouts))
    if same:
        raise ValueError(f"--out {out!r} is the rollout dump itself; the report would overwrite the rollouts. "
                         "Name another file, e.g. report.json.")
    if os.path.isdir(out):
        raise ValueError(f"--out {out!r} is a folder; name a file in it, e.g. {os.path.join(out, 'report.json')}.")
    folder = os.path.dirname(os.path.abspath(out))
    try:
        os.makedirs(folder, exist_ok=True)
    except OSError as e:
        raise ValueError(f"--out {out!r}: its folder cannot be created ({e}).") from e
    if not os.access(folder, os.W_OK) or (os.path.exists(out) and not os.access(out, os.W_OK)):
        raise ValueError(f"--out {out!r} is not writable; name a file in a folder you can write to.")


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(message)s")
    logging.getLogger("ragen_jax.diagnostics").setLevel(logging.INFO)
    from ragen_jax.diagnostics.offline import offline_report

    try:
        if args.out:
            check_out(args.out, args.rollouts)
        metrics = offline_report(args.rollouts, args.checkpoint, seed=args.seed, step=args.step,
                                 batch_size=args.batch_size, **settings_from(args))
    except (FileNotFoundError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(summary(metrics))
    if args.out:
        with open(args.out, "w") as f:
            json.dump(metrics, f, indent=2, sort_keys=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
