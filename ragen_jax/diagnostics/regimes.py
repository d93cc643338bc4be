"""The four reasoning regimes of RAGEN-2 on the (H(Z|X), I(X;Z)) plane.

High H(Z|X) + high MI: diverse reasoning (healthy). High H(Z|X) + low MI: template collapse
(varied-looking text that ignores the input). Low H(Z|X) + high MI: compressed reasoning (short,
input-specific). Low + low: low-entropy collapse. The thresholds are heuristics read from the
config; MI can be compared as a fraction of its log N bound (mi_relative) so runs with different
sample counts share one threshold.
"""

from __future__ import annotations

from typing import Any, Mapping

REGIMES = ("diverse", "template_collapse", "compressed", "low_entropy_collapse")
DEFAULT_THRESHOLDS: dict[str, Any] = {
    "conditional_entropy": 0.5,  # nats per reasoning token (H(Z|X) estimate)
    "mi": 0.05,  # nats (absolute), or a fraction of log N when mi_relative
    "mi_relative": False,
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
    """Regime name for one (H(Z|X), MI) point."""
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
    returns {} when they are absent (MI not computed this step).
    """
    try:
        h = metrics[f"{prefix}/conditional_entropy_est"]
        mi = metrics[f"{prefix}/mi_estimate"]
    except KeyError:
        return {}
    name = classify(h, mi, thresholds, metrics.get(f"{prefix}/mi_upper_bound"))
    out = {f"{prefix}/regime": float(REGIMES.index(name))}
    out.update({f"{prefix}/regime_{r}": float(r == name) for r in REGIMES})
    return out
