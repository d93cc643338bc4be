"""Echo-Trap early warnings: pure checks over metric histories (oldest first).

RAGEN's Echo Trap shows three precursors of collapse: the in-group reward std falls (groups stop
carrying signal), the policy's token entropy collapses, and gradient norms spike. Each check
returns a message or None; `echo_trap_warnings` runs all of them from one metric history dict.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

import numpy as np

DEFAULTS: dict[str, Any] = {
    "window": 10,  # steps averaged for "recent" and for the reference peak
    "reward_std_drop": 0.5,  # warn when recent mean std < (1 - drop) * best earlier window mean
    "entropy_drop": 0.5,  # warn when recent entropy < (1 - drop) * first window mean ...
    "entropy_floor": 0.05,  # ... or below this absolute floor (nats per token)
    "grad_spike_factor": 5.0,  # warn when the latest grad norm > factor * median of the window
    "reward_std_key": "rollout/in_group_reward_std",
    "entropy_key": "actor/entropy",
    "grad_norm_key": "actor/grad_norm",
}


def _finite(history: Sequence[float]) -> np.ndarray:
    arr = np.asarray(history, dtype=np.float64)
    return arr[np.isfinite(arr)]


def falling_reward_std(history: Sequence[float], window: int = 10, drop: float = 0.5) -> str | None:
    """Recent mean in-group reward std fell below (1 - drop) of its best earlier window mean."""
    h = _finite(history)
    if h.size < 2 * window:
        return None
    rolling = np.convolve(h, np.ones(window) / window, mode="valid")
    peak, recent = rolling[:-window].max(), rolling[-1]
    if peak > 0 and recent < (1 - drop) * peak:
        return (
            f"in-group reward std fell to {recent:.3g} from a peak of {peak:.3g} "
            f"({100 * (1 - recent / peak):.0f}% lower): groups carry little signal (Echo Trap)"
        )
    return None


def entropy_collapse(
    history: Sequence[float], window: int = 10, drop: float = 0.5, floor: float = 0.05
) -> str | None:
    """Recent mean token entropy fell below a floor or by `drop` from the first window."""
    h = _finite(history)
    if h.size < window:
        return None
    recent = h[-window:].mean()
    if recent < floor:
        return f"token entropy {recent:.3g} is below the floor {floor:.3g}: entropy collapse"
    if h.size >= 2 * window:
        start = h[:window].mean()
        if start > 0 and recent < (1 - drop) * start:
            return f"token entropy fell to {recent:.3g} from {start:.3g}: entropy collapse"
    return None


def grad_norm_spike(history: Sequence[float], window: int = 10, factor: float = 5.0) -> str | None:
    """The latest gradient norm exceeds `factor` times the median of the window before it."""
    h = _finite(history)
    if h.size < window + 1:
        return None
    baseline = float(np.median(h[-window - 1 : -1]))
    if baseline > 0 and h[-1] > factor * baseline:
        return f"gradient norm {h[-1]:.3g} is {h[-1] / baseline:.1f}x the recent median {baseline:.3g}"
    return None


def echo_trap_warnings(
    histories: Mapping[str, Sequence[float]], config: Mapping[str, Any] | None = None
) -> tuple[list[str], dict[str, float]]:
    """All warnings for metric histories -> (messages, `warnings/*` 0/1 flags for logging)."""
    cfg = dict(DEFAULTS)
    for key, value in dict(config or {}).items():
        if key not in DEFAULTS:
            raise ValueError(f"Unknown warning option {key!r}; known: {sorted(DEFAULTS)}.")
        cfg[key] = value
    w = int(cfg["window"])
    checks = {
        "falling_reward_std": falling_reward_std(
            histories.get(cfg["reward_std_key"], ()), w, cfg["reward_std_drop"]
        ),
        "entropy_collapse": entropy_collapse(
            histories.get(cfg["entropy_key"], ()), w, cfg["entropy_drop"], cfg["entropy_floor"]
        ),
        "grad_norm_spike": grad_norm_spike(
            histories.get(cfg["grad_norm_key"], ()), w, cfg["grad_spike_factor"]
        ),
    }
    messages = [msg for msg in checks.values() if msg]
    flags = {f"warnings/{name}": float(msg is not None) for name, msg in checks.items()}
    flags["warnings/count"] = float(len(messages))
    return messages, flags
