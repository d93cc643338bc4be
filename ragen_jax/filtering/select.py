"""Group selection strategies of the SNR-adaptive rollout filter (RAGEN's rules, host numpy).

All strategies return the kept group indices sorted ascending. Ties are broken towards the lower
group index (stable sorts), so results are deterministic.
"""

from __future__ import annotations

import numpy as np

STRATEGIES = ("top_p", "top_k", "top_k_abs", "min_p")
PROB_MODES = ("linear", "softmax")
ZERO_TOL = 1e-10


def _order(scores: np.ndarray, largest: bool) -> np.ndarray:
    """Stable ordering: descending when largest, ascending otherwise."""
    return np.argsort(-scores if largest else scores, kind="stable")


def _top_p_linear(scores: np.ndarray, value: float, eps: float, largest: bool) -> np.ndarray:
    """Walk sorted scores until their running sum reaches value*sum - eps; else keep nothing.

    As RAGEN's tensors: a float32 threshold, the running sum accumulated in float64 and rounded to float32 to be
    compared with it, so a prefix that sums exactly to the threshold (0.2 + 0.1 against 0.75 * 0.4) reaches it.
    """
    order = _order(scores, largest)
    total = scores[order].sum()  # summed in sorted order so the result ignores group order
    threshold = np.float32(np.float32(value) * total) - np.float32(eps)
    running, count = 0.0, 0
    for score in scores[order]:
        if np.float32(running) >= threshold or score <= 0:
            break
        running += float(score)
        count += 1
    return order[:count] if np.float32(running) >= threshold else order[:0]


def _top_p_softmax(scores: np.ndarray, value: float, largest: bool) -> np.ndarray:
    """Smallest prefix of softmax(scores) (sorted desc) whose cumulative mass reaches value.

    As RAGEN's tensors: float32 probabilities, their running sum accumulated exactly and rounded to float32,
    compared with float32(value). Tied groups put the mass exactly on the value (10 equal groups at 0.7:
    7 groups), where a float32 running sum or ratio can land one ulp short and keep a group more.
    """
    logits = scores if largest else -scores
    order = np.argsort(-logits, kind="stable")
    weights = np.exp(logits[order] - logits[order[0]])  # float32, normalised in sorted order: order-free
    probs = (weights / np.float32(weights.sum(dtype=np.float64))).astype(np.float32)
    mass = np.cumsum(probs, dtype=np.float64).astype(np.float32)
    k = int(np.searchsorted(mass, np.float32(value), side="left")) + 1
    return order[: min(k, scores.size)]


def select_groups(
    scores: np.ndarray,
    strategy: str = "top_p",
    value: float = 1.0,
    *,
    include_zero: bool = True,
    eps: float = 0.01,
    prob_mode: str = "linear",
    largest: bool = True,
) -> np.ndarray:
    """Kept group indices [K] (sorted) from group scores [G].

    include_zero=False first drops groups with |score| <= 1e-10. top_p: linear (score-sum rule)
    or softmax mode, value >= 1 keeps every remaining group; top_k: fraction value of all G
    groups (at least 1); top_k_abs: int(value) groups (at least 1); min_p: scores within value*max.
    """
    scores = np.asarray(scores, dtype=np.float32)  # float32 like RAGEN, so thresholds round alike
    if scores.ndim != 1:
        raise ValueError(f"scores must be 1-D [G], got shape {scores.shape}.")
    if strategy not in STRATEGIES:
        raise ValueError(f"Unknown filter strategy {strategy!r}; choose one of {STRATEGIES}.")
    if prob_mode not in PROB_MODES:
        raise ValueError(f"Unknown top_p prob_mode {prob_mode!r}; choose one of {PROB_MODES}.")
    num_groups = scores.size
    index = np.arange(num_groups)
    if not include_zero:
        nonzero = np.abs(scores) > ZERO_TOL
        scores, index = scores[nonzero], index[nonzero]
    if index.size == 0:
        return index

    if strategy == "top_p":
        if value >= 1.0:
            local = np.arange(index.size)
        elif prob_mode == "linear":
            local = _top_p_linear(scores, value, eps, largest)
        else:
            local = _top_p_softmax(scores, value, largest)
    elif strategy in ("top_k", "top_k_abs"):
        k = int(value * num_groups) if strategy == "top_k" else int(value)
        k = max(min(k, index.size), 1)
        local = _order(scores, largest)[:k]
    else:  # min_p
        if largest:
            keep = scores >= np.float32(scores.max() * np.float32(value)) - np.float32(ZERO_TOL)
        else:
            threshold = np.float32(scores.min() / np.float32(value + ZERO_TOL))
            keep = scores <= threshold + np.float32(ZERO_TOL)
        local = np.nonzero(keep)[0]
    return np.sort(index[local])
