"""`python -m ragen_jax.diagnostics ROLLOUTS --checkpoint DIR`: reasoning-collapse report for saved rollouts,
and with `--analysis gradients` (or `both`) RAGEN-2's gradient analysis of them.

ROLLOUTS: `rollouts.pkl` of `run.py --mode=eval` (exact sampled tokens, as the trainer scores them) or a
JSONL dump (its recorded response tokens; text re-tokenized where it has none). DIR: a Hugging Face model
folder, or a run folder (its hf_export/, else its latest checkpoint; `--checkpoint-step N` picks one); a run
folder also gives the run's diagnostics settings (pairs, samplings, thresholds) unless flags override them.
`--step N` draws the pairs as the trainer does at step N. The gradient analysis needs a PKL of played episodes
and a run folder with checkpoints (the run's config, critic and KL reference rebuild what the trainer
differentiates); it splits the policy gradient norm into task, entropy and KL parts per reward-variance bucket.
"""

from __future__ import annotations

import argparse
import itertools
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
    p.add_argument("--analysis", choices=("collapse", "gradients", "both"), default="collapse",
                   help="the MI / collapse report (default), RAGEN-2's gradient analysis, or both")
    p.add_argument("--checkpoint-step", type=_number(int, 0), default=None,
                   help="the run folder's checkpoint N (default: hf_export/, else the latest; the gradient "
                        "analysis always reads checkpoints/). Give N-1 with the rollouts of step N for the "
                        "trainer's numbers")
    g = p.add_argument_group("gradient analysis")
    g.add_argument("--buckets", type=_number(int, 1), default=6,
                   help="reward-variance buckets (RAGEN's gradient_analysis_num_buckets)")
    g.add_argument("--bucket-mode", choices=("quantile", "fixed_rv"), default="quantile",
                   help="RAGEN's gradient_analysis_bucket_mode")
    g.add_argument("--prefilter", action="store_true",
                   help="split every group (grad_norm_prefilter/*) instead of the filter's kept groups")
    g.add_argument("--mini-batch-size", type=_number(int, 1), default=None,
                   help="rows per mini-batch (default: the run's trainer.mini_batch_size)")
    g.add_argument("--micro-batch-size", type=_number(int, 1), default=None,
                   help="rows per micro-batch (default: the run's trainer.micro_batch_size)")
    g.add_argument("--plot", default=None, help="draw the parts per bucket to this PNG")
    g.add_argument("--rv-table", default=None,
                   help="write each bucket's groups and their reward std to this CSV (bucket,group_id,reward_std)")
    return p


def _regime_name(index: float) -> str:
    return REGIMES[int(index)] if math.isfinite(index) else "undefined (H(Z|X) or MI is not finite: NaN log-probs?)"


def summary(metrics: dict[str, float]) -> str:
    """The printed report: per sampling, MI, H(Z|X), retrieval, z-score and regime."""
    lines = []
    for prefix in (FIRST_TURN, TRAJECTORY):
        if f"{prefix}/mi_estimate" not in metrics:
            continue
        g = lambda k: metrics.get(f"{prefix}/{k}", math.nan)  # noqa: E731 - a partial report prints nan
        lines += [
            f"[{prefix}] {int(g('num_samples'))} pairs x {int(g('num_prompts'))} prompts",
            f"  MI estimate        {g('mi_estimate'):.4f} nats (bound log N = {g('mi_upper_bound'):.4f})",
            f"  H(Z|X) estimate    {g('conditional_entropy_est'):.4f} nats/token"
            f"   H(Z) {g('reasoning_entropy_est'):.4f}",
            f"  retrieval_at_1     {g('retrieval_accuracy'):.3f} (chance {g('retrieval_chance_level'):.3f})"
            f"   _at_8 {g('retrieval_accuracy_at_8'):.3f} (chance {g('retrieval_chance_level_at_8'):.3f})",
            f"  MI z-score         {g('mi_zscore'):.3f}   seq {g('mi_zscore_seq'):.3f}   EMA {g('mi_zscore_ema'):.3f}"
            f"   EMA seq {g('mi_zscore_ema_seq'):.3f}   (seq MI {g('mi_seq_estimate'):.3f})",
            f"  above chance       retrieval_at_1 {g('retrieval_above_chance'):+.3f}"
            f"   _at_8 {g('retrieval_above_chance_at_8'):+.3f}",
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


def gradient_summary(metrics: dict[str, float], prefix: str = "grad_norm") -> str:
    """The printed gradient analysis: per bucket its rows, groups and reward std, each part's norm, the total's and
    the task part's cosine with the others."""
    from ragen_jax.diagnostics.plots import GRAD_PARTS, bucket_names

    buckets = [b for b in ["all"] + bucket_names(metrics, prefix) if f"{prefix}/{b}/task" in metrics]
    parts = [c for c in GRAD_PARTS if f"{prefix}/all/{c}" in metrics]
    cosines = [f"{a}_{b}" for a, b in itertools.combinations(parts, 2) if f"{prefix}/all/cos/{a}_{b}" in metrics]
    head = f"{'bucket':<10} {'rows':>5} {'groups':>6} {'RV mean':>8} " + " ".join(
        f"{c:>10}" for c in parts + ["total"]) + "".join(f" {'cos ' + c:>16}" for c in cosines)
    lines = [f"[{prefix}] gradient norm by part and reward-variance bucket", head]
    for b in buckets:
        g = lambda k: metrics[f"{prefix}/{b}/{k}"]  # noqa: E731
        lines.append(f"{b:<10} {int(g('sample_count')):>5} {int(g('group_rv_count')):>6} {g('reward_std_mean'):>8.4f} "
                     + " ".join(f"{g(c):>10.4g}" for c in parts + ["total"])
                     + "".join(f" {g('cos/' + c):>16.3f}" for c in cosines))
    lines.append("(the parts' gradients add up to the total's; their norms do not: see the cosines)")
    return "\n".join(lines)


def write_rv_table(path: str, buckets: dict) -> None:
    """RAGEN's bucket_rv_table as CSV: one row per (bucket, group) with the group's in-group reward std."""
    import csv

    with open(path, "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["bucket", "group_id", "reward_std"])
        for name, bucket in buckets.items():
            writer.writerows([name, int(gid), float(std)] for gid, std in zip(bucket.group_ids, bucket.group_std))


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


def check_out(out: str, rollouts: str, flag: str = "--out") -> None:
    """Before any work: `flag`'s path (--out, --plot, --rv-table) must be a writable file path that is not the
    rollout dump (writing there would replace the rollouts), in a folder that exists (created if missing)."""
    same = os.path.abspath(out) == os.path.abspath(rollouts) or (
        os.path.exists(out) and os.path.exists(rollouts) and os.path.samefile(out, rollouts))
    if same:
        raise ValueError(f"{flag} {out!r} is the rollout dump itself; the report would overwrite the rollouts. "
                         "Name another file, e.g. report.json.")
    if os.path.isdir(out):
        raise ValueError(f"{flag} {out!r} is a folder; name a file in it, e.g. {os.path.join(out, 'report.json')}.")
    folder = os.path.dirname(os.path.abspath(out))
    try:
        os.makedirs(folder, exist_ok=True)
    except OSError as e:
        raise ValueError(f"{flag} {out!r}: its folder cannot be created ({e}).") from e
    if not os.access(folder, os.W_OK) or (os.path.exists(out) and not os.access(out, os.W_OK)):
        raise ValueError(f"{flag} {out!r} is not writable; name a file in a folder you can write to.")


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(message)s")
    logging.getLogger("ragen_jax.diagnostics").setLevel(logging.INFO)
    from ragen_jax.diagnostics.offline import offline_report

    metrics: dict[str, float] = {}
    try:
        for flag, out in (("--out", args.out), ("--plot", args.plot), ("--rv-table", args.rv_table)):
            if out:
                check_out(out, args.rollouts, flag)
        if args.analysis != "collapse":
            from ragen_jax.diagnostics.offline import load_dump

            if load_dump(args.rollouts)[0] != "episodes":  # before any model loads
                raise ValueError(f"--analysis {args.analysis} needs played episodes (a .pkl such as run.py "
                                 f"--mode=eval's rollouts.pkl); {args.rollouts!r} holds text trajectories.")
        if args.analysis != "gradients":
            metrics.update(offline_report(args.rollouts, args.checkpoint, seed=args.seed, step=args.step,
                                          batch_size=args.batch_size, checkpoint_step=args.checkpoint_step,
                                          **settings_from(args)))
        if args.analysis != "collapse":
            from ragen_jax.diagnostics.offline_gradients import offline_gradient_split

            split, buckets = offline_gradient_split(
                args.rollouts, args.checkpoint, checkpoint_step=args.checkpoint_step, num_buckets=args.buckets,
                bucket_mode=args.bucket_mode, prefilter=args.prefilter, mini_batch_size=args.mini_batch_size,
                micro_batch_size=args.micro_batch_size)
            metrics.update(split)
    except (FileNotFoundError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    if args.analysis != "gradients":
        print(summary(metrics))
    if args.analysis != "collapse":
        prefix = "grad_norm_prefilter" if args.prefilter else "grad_norm"
        print(gradient_summary(metrics, prefix))
        if args.rv_table:
            write_rv_table(args.rv_table, buckets)
        if args.plot:
            from ragen_jax.diagnostics.plots import gradient_buckets_image, save_png

            save_png(gradient_buckets_image(metrics, prefix), args.plot)
    if args.out:
        with open(args.out, "w") as f:
            json.dump(metrics, f, indent=2, sort_keys=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
