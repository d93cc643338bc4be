"""Per-group statistics and selection scores for the SNR-adaptive rollout filter.

Groups are contiguous: trajectory n belongs to group n // group_size. Standard deviations are
unbiased (ddof=1), as RAGEN computes them; a group of one trajectory has std 0 by definition here
(RAGEN would produce NaN).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Mapping, NamedTuple

import numpy as np

from ragen_jax.algos.registry import Registry

# the per-trajectory quantities the trainer measures for a filter metric
QUANTITIES = ("reward", "entropy", "length")


class FilterMetric(NamedTuple):
    """A group selection score: the per-trajectory `quantity` it reads (one of QUANTITIES) and
    score(stats) -> [G], where stats holds `group_stats` of that quantity ("std", "mean", "max", "sum",
    "count", each [G]) plus "values" [G, K] (the quantity per member) and "valid" [G, K] bool (members that
    count: an episode whose env failed does not). Register one in FILTER_METRICS, or name it by import path
    ("package.module:attr") in config.filter.metric."""

    quantity: str
    score: Callable[[Mapping[str, np.ndarray]], np.ndarray]


FILTER_METRICS: Registry = Registry("filter metric", "ragen_jax.filtering.FILTER_METRICS")

# RAGEN's metrics: name -> (per-trajectory quantity, per-group statistic used as the selection score)
METRICS: Mapping[str, tuple[str, str]] = {
    "reward_variance": ("reward", "std"),
    "reward": ("reward", "mean"),
    "reward_mean": ("reward", "mean"),
    "reward_sum": ("reward", "sum"),
    "entropy": ("entropy", "mean"),
    "entropy_variance": ("entropy", "std"),
    "length": ("length", "mean"),
}
# other spellings RAGEN's build_rollout_filter accepts for a metric
METRIC_ALIASES: Mapping[str, str] = {"reward_std": "reward_variance", "entropy_std": "entropy_variance"}


def _statistic(name: str) -> Callable[[Mapping[str, np.ndarray]], np.ndarray]:
    def score(stats: Mapping[str, np.ndarray]) -> np.ndarray:
        return stats[name]
    score.__name__ = f"group_{name}"
    return score


for _name, (_quantity, _stat) in METRICS.items():
    FILTER_METRICS.register(_name, FilterMetric(_quantity, _statistic(_stat)))


def _as_groups(values: np.ndarray, group_size: int, name: str) -> np.ndarray:
    """values [N] -> [G, group_size], with a clear error when N is not a multiple."""
    values = np.asarray(values, dtype=np.float64)
    if values.ndim != 1:
        raise ValueError(f"{name} must be 1-D [N], got shape {values.shape}.")
    if group_size < 1 or values.shape[0] % group_size != 0:
        raise ValueError(
            f"{name} has {values.shape[0]} entries, not a multiple of group_size={group_size}; "
            "pass one value per trajectory with groups stored contiguously."
        )
    return values.reshape(-1, group_size)


def group_stats(values: np.ndarray, group_size: int, name: str = "values",
                valid: np.ndarray | None = None) -> dict[str, np.ndarray]:
    """Per-group std (unbiased), mean, max and sum of per-trajectory values [N] -> each [G].

    valid [N] bool (default all): trajectories that count; the others (e.g. an episode whose env failed)
    are left out of their group's statistics. A group with fewer than two valid members has std 0, one
    with none has every statistic 0 (`count` [G] says how many members counted).
    """
    grouped = _as_groups(values, group_size, name)
    mask = np.ones_like(grouped, bool) if valid is None else _as_groups(valid, group_size, "valid") > 0
    count = mask.sum(axis=1)
    kept = np.where(mask, grouped, 0.0)
    total = kept.sum(axis=1)
    mean = total / np.maximum(count, 1)
    sq = np.where(mask, (grouped - mean[:, None]) ** 2, 0.0).sum(axis=1)
    std = np.where(count > 1, np.sqrt(sq / np.maximum(count - 1, 1)), 0.0)
    top = np.where(count > 0, np.where(mask, grouped, -np.inf).max(axis=1), 0.0)
    return {"std": std, "mean": mean, "max": top, "sum": total, "count": count}


def canonical_metric(metric: str | None) -> str:
    """The FILTER_METRICS name for a metric as RAGEN resolves its own: case-insensitive, None ->
    "reward_variance", "reward_std" / "entropy_std" -> "reward_variance" / "entropy_variance". A name
    registered by a user, or an import path "package.module:attr", is kept as written (and checked)."""
    if metric in FILTER_METRICS or (isinstance(metric, str) and ":" in metric):
        resolve_metric(metric)
        return metric
    name = (metric or "reward_variance").lower()
    name = METRIC_ALIASES.get(name, name)
    if name not in FILTER_METRICS:
        known = sorted(set(FILTER_METRICS.names()) | set(METRIC_ALIASES))
        raise ValueError(f"Unknown filter metric {metric!r}; choose one of {known}, register your own in "
                         "ragen_jax.filtering.FILTER_METRICS, or name one by import path 'package.module:attr'.")
    return name


def resolve_metric(metric: str) -> FilterMetric:
    """The FilterMetric a registered name or import path names, with a clear error when it is not one."""
    try:
        found = FILTER_METRICS.get(metric)
    except (ImportError, AttributeError, KeyError) as e:
        raise ValueError(f"filter metric {metric!r}: {e.args[0] if e.args else e}") from e
    if not (isinstance(found, tuple) and len(found) == 2 and found[0] in QUANTITIES and callable(found[1])):
        raise ValueError(f"filter metric {metric!r} {_metric_problem(found)}; a metric is FilterMetric(quantity, "
                         f"score) with quantity one of {QUANTITIES} (ragen_jax.filtering.FilterMetric, "
                         "docs/custom_losses.md).")
    return FilterMetric(*found)


def _metric_problem(found: Any) -> str:
    """What is wrong with `found` as a FilterMetric, and how to fix it."""
    if callable(found) and not isinstance(found, tuple):
        return f"is the function {getattr(found, '__name__', found)!r}: wrap it, FilterMetric(\"reward\", fn)"
    if isinstance(found, tuple) and len(found) == 2 and found[0] not in QUANTITIES:
        return f"reads the quantity {found[0]!r}, which the trainer does not measure"
    if isinstance(found, tuple) and len(found) == 2:
        return f"has a score of type {type(found[1]).__name__}, not a function"
    return f"is {found!r}"


def metric_quantity(metric: str) -> str:
    """Which per-trajectory quantity ("reward", "entropy", "length") a metric reads."""
    return resolve_metric(canonical_metric(metric)).quantity


def episode_values(row_values: np.ndarray, episode_ids: np.ndarray, num_episodes: int,
                   reduce: str = "sum") -> np.ndarray:
    """Per-row values [R] (a trajectory row, or one turn's row) -> per-episode values [num_episodes].

    RAGEN aggregates turn rows by episode: lengths are summed ("sum"), entropies averaged ("mean"). Rows
    with an episode id outside [0, num_episodes) (padding) are ignored; an episode without rows gets 0.
    """
    if reduce not in ("sum", "mean"):
        raise ValueError(f"episode_values reduce must be 'sum' or 'mean', got {reduce!r}.")
    row_values = np.asarray(row_values, dtype=np.float64)
    episode_ids = np.asarray(episode_ids)
    if row_values.shape != episode_ids.shape or row_values.ndim != 1:
        raise ValueError(f"Need row_values [R] and episode_ids [R]; got {row_values.shape}, {episode_ids.shape}.")
    real = (episode_ids >= 0) & (episode_ids < num_episodes)
    total = np.bincount(episode_ids[real], weights=row_values[real], minlength=num_episodes)
    if reduce == "sum":
        return total
    return total / np.maximum(np.bincount(episode_ids[real], minlength=num_episodes), 1)


def group_scores(
    rewards: np.ndarray | None,
    group_size: int,
    metric: str = "reward_variance",
    *,
    entropy: np.ndarray | None = None,
    length: np.ndarray | None = None,
    valid: np.ndarray | None = None,
) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """Selection scores [G] for `metric` plus the group stats of the quantity it reads.

    rewards/entropy/length are per-trajectory [N] (total reward, mean token entropy, response
    length); only the one the metric reads is required. valid [N]: see `group_stats`.
    """
    metric = canonical_metric(metric)
    quantity, score = resolve_metric(metric)
    values = {"reward": rewards, "entropy": entropy, "length": length}[quantity]
    if values is None:
        arg = "rewards" if quantity == "reward" else quantity
        raise ValueError(f"Filter metric {metric!r} needs per-trajectory `{arg}` [N].")
    stats = group_stats(values, group_size, name=quantity, valid=valid)
    members = {"values": _as_groups(values, group_size, quantity),
               "valid": np.ones((stats["std"].size, group_size), bool) if valid is None
               else _as_groups(valid, group_size, "valid") > 0}
    scores = np.asarray(score({**stats, **members}), np.float64)
    if scores.shape != stats["std"].shape or not np.isfinite(scores).all():
        raise ValueError(f"Filter metric {metric!r} must give one finite score per group [{stats['std'].size}]; "
                         f"got shape {scores.shape}" + ("" if scores.shape != stats["std"].shape else
                                                        f" with {int((~np.isfinite(scores)).sum())} not finite") +
                         ".")
    return scores, stats
