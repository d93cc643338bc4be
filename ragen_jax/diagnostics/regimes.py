"""The four reasoning regimes of RAGEN-2 on the (H(Z|X), I(X;Z)) plane.

High H(Z|X) + high MI: diverse reasoning (healthy). High H(Z|X) + low MI: template collapse
(varied-looking text that ignores the input). Low H(Z|X) + high MI: compressed reasoning (short,
input-specific). Low + low: low-entropy collapse. The thresholds come from the config; MI is compared as a
fraction of its log N bound (mi_relative) so runs with different sample counts share one threshold.

The defaults are calibrated (experiments/studies/calibrate_regimes.py, docs/diagnostics.md): the tiny Sokoban and
FrozenLake policies warm-started to sit in each regime by construction, two seeds each, 96 points. H(Z|X)
separated at 0.386 (input-tied thinking, FrozenLake) vs 0.962 nats/token (the same plus random words, Sokoban);
MI / log N at 0.004 (one text, or random words) vs 0.044. Each default lies in the middle of its gap (the
geometric middle for H(Z|X)); all 96 points land in their built regime. (Sokoban's arms alone gave 0.23 and
0.12, which put 19 of FrozenLake's 48 points in the wrong regime.)
"""

from __future__ import annotations

import math
from typing import Any, Mapping

REGIMES = ("diverse", "template_collapse", "compressed", "low_entropy_collapse")
DEFAULT_THRESHOLDS: dict[str, Any] = {
    "conditional_entropy": 0.61,  # nats per reasoning token (H(Z|X) estimate)
    "mi": 0.024,  # a fraction of log N when mi_relative, else nats
    "mi_relative": True,
}


def thresholds_from(config: Mapping[str, Any] | None) -> dict[str, Any]:
    """Defaults overridden by a config mapping; unknown keys are an error."""
    merged = dict(DEFAULT_THRESHOLDS)
    for key, value in dict(config or {}).items():
        if key not in DEFAULT_THRESHOLDS:
            raise ValueError(f"Unknown regime threshold {key!r}; known: {sorted(DEFAULT_THRESHOLDS)}.")
        merged[key] = value
    return merged


def classify(
    conditional_entropy: float,
    mi: float,
    thresholds: Mapping[str, Any] | None = None,
    mi_upper_bound: float | None = None,
) -> str:
    """Regime name for one (H(Z|X), MI) point; both must be finite (a NaN compared below every threshold and
    read as a confident low-entropy collapse)."""
    if not (math.isfinite(conditional_entropy) and math.isfinite(mi)):
        raise ValueError(f"No regime for a non-finite point: H(Z|X)={conditional_entropy}, MI={mi}.")
    th = thresholds_from(thresholds)
    if th["mi_relative"]:
        if not mi_upper_bound or mi_upper_bound <= 0:
            raise ValueError("mi_relative thresholds need mi_upper_bound = log N > 0.")
        mi = mi / mi_upper_bound
    high_h = conditional_entropy >= th["conditional_entropy"]
    high_mi = mi >= th["mi"]
    if high_h:
        return "diverse" if high_mi else "template_collapse"
    return "compressed" if high_mi else "low_entropy_collapse"


def regime_metrics(
    metrics: Mapping[str, float], prefix: str, thresholds: Mapping[str, Any] | None = None
) -> dict[str, float]:
    """`{prefix}/regime` (index into REGIMES) and one-hot `{prefix}/regime_<name>` as scalars.

    Reads `{prefix}/conditional_entropy_est`, `{prefix}/mi_estimate`, `{prefix}/mi_upper_bound`;
    returns {} when they are absent (MI not computed this step). A non-finite H(Z|X) or MI (NaN log-probs of a
    broken policy) has no regime: `regime` is NaN and every one-hot 0.
    """
    try:
        h = metrics[f"{prefix}/conditional_entropy_est"]
        mi = metrics[f"{prefix}/mi_estimate"]
    except KeyError:
        return {}
    if not (math.isfinite(h) and math.isfinite(mi)):
        return {f"{prefix}/regime": math.nan, **{f"{prefix}/regime_{r}": 0.0 for r in REGIMES}}
    name = classify(h, mi, thresholds, metrics.get(f"{prefix}/mi_upper_bound"))
    out = {f"{prefix}/regime": float(REGIMES.index(name))}
    out.update({f"{prefix}/regime_{r}": float(r == name) for r in REGIMES})
    return out


HIGH_ENTROPY_REGIMES = ("diverse", "template_collapse")
HIGH_MI_REGIMES = ("diverse", "compressed")


def best_cut(values, high, log_scale: bool = False) -> tuple[float, float, float]:
    """The threshold that best splits values [N] into low (< cut) and high (>= cut) by their labels high [N] bool
    -> (cut, accuracy, gap). The cut lies in the middle of the widest gap among the most accurate ones (the
    geometric middle with log_scale when both sides are > 0); gap is that gap's width (in log units with
    log_scale), the margin a run has before it changes regime."""
    import numpy as np

    values, high = np.asarray(values, np.float64), np.asarray(high, bool)
    if values.ndim != 1 or values.shape != high.shape or len(values) < 2 or high.all() or not high.any():
        raise ValueError("best_cut needs >= 2 values [N] with labels [N] of both kinds.")
    order = np.sort(np.unique(values))
    candidates = np.concatenate([[order[0] - 1.0], (order[:-1] + order[1:]) / 2, [order[-1] + 1.0]])
    best = None
    for i, cut in enumerate(candidates):
        accuracy = float(np.mean((values >= cut) == high))
        lo, hi = (order[i - 1] if i > 0 else None), (order[i] if i < len(order) else None)
        if lo is None or hi is None:
            gap, middle = 0.0, cut
        elif log_scale and lo > 0:
            gap, middle = float(np.log(hi / lo)), float(np.sqrt(lo * hi))
        else:
            gap, middle = float(hi - lo), float(cut)
        if best is None or (accuracy, gap) > (best[1], best[2]):
            best = (middle, accuracy, gap)
    return best


def calibrate(points) -> tuple[dict[str, Any], dict[str, float]]:
    """Regime thresholds from diagnostics points of runs whose regime is known: points is a sequence of
    (H(Z|X) nats/token, MI / log N, regime name). -> (thresholds with mi_relative, a report: the share of points
    classified as labelled, and each axis's accuracy and gap)."""
    points = list(points)
    unknown = sorted({p[2] for p in points} - set(REGIMES))
    if unknown:
        raise ValueError(f"Unknown regime labels {unknown}; known: {REGIMES}.")
    h_cut, h_acc, h_gap = best_cut([p[0] for p in points], [p[2] in HIGH_ENTROPY_REGIMES for p in points],
                                   log_scale=True)
    mi_cut, mi_acc, mi_gap = best_cut([p[1] for p in points], [p[2] in HIGH_MI_REGIMES for p in points])
    thresholds = {"conditional_entropy": h_cut, "mi": mi_cut, "mi_relative": True}
    correct = [classify(h, mi, thresholds, 1.0) == label for h, mi, label in points]
    return thresholds, {"accuracy": sum(correct) / len(correct), "entropy_accuracy": h_acc, "entropy_gap_log": h_gap,
                        "mi_accuracy": mi_acc, "mi_gap": mi_gap, "points": len(points)}
