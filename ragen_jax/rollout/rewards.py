"""Episode-score normalisation (grouped like RAGEN's `reward_normalization`) and seeds."""

from __future__ import annotations

import numpy as np

NORMALIZATIONS = ("identity", "mean_std", "mean", "asym_clip")
GROUPINGS = ("state", "inductive", "batch")


def _normalize_one(x: np.ndarray, method: str) -> np.ndarray:
    if method == "identity":
        return x
    if method == "mean":
        return x - x.mean()
    std = x.std(ddof=1) if len(x) > 1 else 0.0
    z = (x - x.mean()) / (std + 1e-6) if abs(std) > 1e-6 else np.zeros_like(x)
    if method == "mean_std":
        return z
    if method == "asym_clip":
        return np.clip(z, -1.0, 3.0)
    raise ValueError(f"Unknown reward normalisation {method!r}; choose one of {NORMALIZATIONS}.")


def normalize_scores(scores: np.ndarray, group_ids: np.ndarray, tags: np.ndarray, *,
                     method: str = "identity", grouping: str = "state",
                     valid: np.ndarray | None = None) -> np.ndarray:
    """Normalise episode scores [N] within groups: by start state, env tag, or the whole batch.

    As in RAGEN, nothing is normalised when every group has a single member. valid [N] bool: episodes
    that count (False for one whose env failed): the others stay out of the statistics and score 0.
    """
    scores = np.asarray(scores, np.float64)
    if valid is not None and not np.all(valid):
        valid = np.asarray(valid, bool)
        out = np.zeros(len(scores), np.float32)
        out[valid] = normalize_scores(scores[valid], np.asarray(group_ids)[valid], np.asarray(tags)[valid],
                                      method=method, grouping=grouping)
        return out
    if grouping == "state":
        keys = np.asarray(group_ids)
    elif grouping == "inductive":
        keys = np.asarray(tags)
    elif grouping == "batch":
        keys = np.zeros(len(scores), np.int64)
    else:
        raise ValueError(f"Unknown reward grouping {grouping!r}; choose one of {GROUPINGS}.")
    out = scores.copy()
    unique = np.unique(keys)
    if len(unique) == len(scores):
        return out.astype(np.float32)
    for key in unique:
        idx = np.nonzero(keys == key)[0]
        out[idx] = _normalize_one(scores[idx], method)
    return out.astype(np.float32)


def group_seeds(start: int, groups: int, group_size: int) -> tuple[np.ndarray, np.ndarray]:
    """Seeds [groups*group_size] (group g uses start+g for all its members) and group ids."""
    group_ids = np.repeat(np.arange(groups), group_size)
    return (start + group_ids).astype(np.int64), group_ids.astype(np.int32)
