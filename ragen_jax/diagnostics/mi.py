"""Mutual-information proxy of reasoning collapse from a cross-score matrix (RAGEN-2).

L[i, j] is log p(z_i | x_j) (mean per token, or summed for the *_seq variants) for sampled
reasoning z_i (row) under every prompt column x_j. With the uniform mixture over columns,
matched_i = L[i, col(i)] and marginal_i = logsumexp_j L[i, j] - log N give
I(X;Z) ~ mean(matched - marginal) <= log N, H(Z|X) ~ -mean(matched), H(Z) ~ -mean(marginal).
Metric names are RAGEN's without the sampling prefix (e.g. "mi_estimate").
"""

from __future__ import annotations

import math
from typing import Hashable, Sequence

import numpy as np

RETRIEVAL_KS = (2, 4, 8)


def _logsumexp(x: np.ndarray, axis: int) -> np.ndarray:
    top = x.max(axis=axis, keepdims=True)
    return np.log(np.exp(x - top).sum(axis=axis)) + np.squeeze(top, axis=axis)


def matched_marginal(L: np.ndarray, col_of_row: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(matched [R], marginal [R]) from L [R, C] and each row's own column [R]."""
    rows, cols = L.shape
    return L[np.arange(rows), col_of_row], _logsumexp(L, axis=1) - math.log(cols)


def retrieval_metrics(
    L: np.ndarray, col_of_row: np.ndarray, col_keys: Sequence[Hashable] | None = None
) -> dict[str, float]:
    """Retrieval accuracy @1/2/4/8 of argmax_j L[i, j] against chance.

    Columns with equal keys (identical prompts) count as one answer: ranking any of them first
    is correct, and chance is the share of columns equal to the row's own (times k, capped at 1).
    """
    rows, cols = L.shape
    keys = list(range(cols)) if col_keys is None else list(col_keys)
    if len(keys) != cols:
        raise ValueError(f"col_keys has {len(keys)} entries for {cols} columns.")
    key_id: dict[Hashable, int] = {}
    col_sig = np.array([key_id.setdefault(k, len(key_id)) for k in keys])
    true_sig = col_sig[col_of_row]
    ranked = np.argsort(-L, axis=1, kind="stable")  # ties go to the lower column
    chance = float((np.bincount(col_sig)[true_sig] / cols).mean())
    accuracy = float((col_sig[ranked[:, 0]] == true_sig).mean())
    metrics = {
        "retrieval_accuracy": accuracy,
        "retrieval_chance_level": chance,
        "retrieval_above_chance": accuracy - chance,
    }
    k_max = min(8, cols)
    for k in RETRIEVAL_KS:
        k_eff = min(k, k_max)
        hit = (col_sig[ranked[:, :k_eff]] == true_sig[:, None]).any(axis=1)
        metrics[f"retrieval_accuracy_at_{k}"] = float(hit.mean())
        metrics[f"retrieval_chance_level_at_{k}"] = min(1.0, chance * k_eff)
        metrics[f"retrieval_above_chance_at_{k}"] = float(hit.mean()) - min(1.0, chance * k_eff)
    return metrics


def mi_estimates(
    L: np.ndarray,
    col_of_row: np.ndarray,
    *,
    L_sum: np.ndarray | None = None,
    lengths: np.ndarray | None = None,
    col_keys: Sequence[Hashable] | None = None,
    ema: tuple[float, float] | None = None,
    ema_decay: float = 0.9,
    std_eps: float = 1e-3,
) -> tuple[dict[str, float], tuple[float, float] | None]:
    """All MI-proxy metrics from L [R, C] (mean per-token log-probs) -> (metrics, new ema).

    The summed variant comes from L_sum [R, C], or from lengths [R] (reasoning token counts) as
    L * lengths. `ema` is the (std, std_seq) of marginal log-probs carried between calls for the
    EMA z-score; None starts it. Fewer than two columns gives ({}, ema): MI is undefined.
    """
    L = np.asarray(L, dtype=np.float64)
    col_of_row = np.asarray(col_of_row, dtype=np.int64)
    if L.ndim != 2 or col_of_row.shape != (L.shape[0],):
        raise ValueError(f"Need L [R, C] and col_of_row [R]; got {L.shape} and {col_of_row.shape}.")
    rows, cols = L.shape
    if cols < 2 or rows == 0:
        return {}, ema
    if col_of_row.min() < 0 or col_of_row.max() >= cols:
        raise ValueError(f"col_of_row entries must lie in [0, {cols}).")
    if L_sum is None:
        if lengths is None:
            raise ValueError("Pass L_sum [R, C] or lengths [R] for the sequence-sum variants.")
        L_sum = L * np.asarray(lengths, dtype=np.float64)[:, None]
    L_sum = np.asarray(L_sum, dtype=np.float64)
    if L_sum.shape != L.shape:
        raise ValueError(f"L_sum {L_sum.shape} must match L {L.shape}.")

    matched, marginal = matched_marginal(L, col_of_row)
    matched_seq, marginal_seq = matched_marginal(L_sum, col_of_row)
    gap, gap_seq = matched - marginal, matched_seq - marginal_seq
    std, std_seq = float(marginal.std()), float(marginal_seq.std())
    if ema is None:
        ema_std, ema_std_seq = std, std_seq
    else:
        ema_std = ema_decay * ema[0] + (1 - ema_decay) * std
        ema_std_seq = ema_decay * ema[1] + (1 - ema_decay) * std_seq
    metrics = {
        "mi_estimate": float(gap.mean()),
        "mi_upper_bound": math.log(cols),
        "matched_log_prob_mean": float(matched.mean()),
        "marginal_log_prob_mean": float(marginal.mean()),
        "mi_seq_estimate": float(gap_seq.mean()),
        "conditional_entropy_est": float(-matched.mean()),
        "reasoning_entropy_est": float(-marginal.mean()),
        "conditional_entropy_seq_est": float(-matched_seq.mean()),
        "reasoning_entropy_seq_est": float(-marginal_seq.mean()),
        "marginal_std": std,
        "marginal_std_seq": std_seq,
        "mi_zscore": float((gap / (std + std_eps)).mean()),
        "mi_zscore_seq": float((gap_seq / (std_seq + std_eps)).mean()),
        "marginal_std_ema": ema_std,
        "marginal_std_ema_seq": ema_std_seq,
        "mi_zscore_ema": float((gap / (ema_std + std_eps)).mean()),
        "mi_zscore_ema_seq": float((gap_seq / (ema_std_seq + std_eps)).mean()),
        "num_samples": float(rows),
        "num_prompts": float(cols),
    }
    metrics.update(retrieval_metrics(L, col_of_row, col_keys))
    return metrics, (ema_std, ema_std_seq)


def prefix_metrics(metrics: dict[str, float], prefix: str) -> dict[str, float]:
    """Prefix metric names, e.g. "collapse_first_turn_sample/mi_estimate"."""
    return {f"{prefix}/{name}": value for name, value in metrics.items()}
