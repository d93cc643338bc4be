"""Reward-variance buckets of a batch's groups, as RAGEN-2's gradient analysis forms them
(RAGEN's `RewardRolloutFilter.split_into_buckets`, config `gradient_analysis_num_buckets` / `_bucket_mode`).

Each row carries its group's in-group reward std (the unbiased std of the group's episode rewards, the
filter's score; `filtering.group_stats(...)["std"]`); a group's value is the mean over its rows (all equal).
- "all": every row, every group.
- "quantile" (RAGEN's default): the groups sorted by reward std, ascending, cut into n = min(num_buckets, G)
  buckets of G // n groups each, the remainder G % n going to the last: bucket_1 holds the lowest reward
  variance, bucket_n the highest. Ties keep group-id order (a stable sort; RAGEN's torch.argsort does not
  promise an order for ties, so which of several equal-std groups lands in which bucket may differ).
- "fixed_rv": fixed std intervals [0, 1), [1, 2), [2, 3), [3, 4), [4, 5), [5, inf) as bucket_1..bucket_6;
  only the buckets holding a group are returned (RAGEN skips the empty ones).
A bucket's rows stay in batch order (RAGEN's boolean-mask selection keeps it).
"""

from __future__ import annotations

import dataclasses

import numpy as np

BUCKET_MODES = ("quantile", "fixed_rv")
FIXED_RV_EDGES = (0.0, 1.0, 2.0, 3.0, 4.0, 5.0)


@dataclasses.dataclass(frozen=True)
class Bucket:
    """rows [n]: indices into the batch's rows, in batch order; group_ids [g] and group_std [g]: its groups and
    their in-group reward std (ascending by std in the variance buckets, by group id in "all")."""

    rows: np.ndarray
    group_ids: np.ndarray
    group_std: np.ndarray


def variance_buckets(group_ids: np.ndarray, reward_std: np.ndarray, *, num_buckets: int = 6,
                     mode: str = "quantile", valid: np.ndarray | None = None) -> dict[str, Bucket]:
    """{"all", "bucket_1", ...} -> Bucket, from each row's group id [N] and its group's reward std [N].

    valid [N] bool (default all): the rows that train (padding rows and failed episodes are left out)."""
    group_ids = np.asarray(group_ids)
    reward_std = np.asarray(reward_std, np.float64)
    if group_ids.ndim != 1 or reward_std.shape != group_ids.shape:
        raise ValueError(f"group_ids and reward_std must both be [N]; got {group_ids.shape} and {reward_std.shape}.")
    if mode not in BUCKET_MODES:
        raise ValueError(f"bucket mode {mode!r} is not one of {BUCKET_MODES} (RAGEN's gradient_analysis_bucket_mode).")
    if num_buckets < 1:
        raise ValueError(f"num_buckets={num_buckets} must be at least 1 (RAGEN's gradient_analysis_num_buckets).")
    valid = np.ones(group_ids.shape, bool) if valid is None else np.asarray(valid, bool)
    rows = np.nonzero(valid)[0]
    unique, inverse = np.unique(group_ids[rows], return_inverse=True)
    if unique.size == 0:
        return {}
    group_std = np.bincount(inverse, weights=reward_std[rows]) / np.bincount(inverse)

    def bucket(groups: np.ndarray) -> Bucket:
        return Bucket(rows[np.isin(inverse, groups)], unique[groups], group_std[groups])

    out = {"all": bucket(np.arange(unique.size))}
    if mode == "quantile":
        order = np.argsort(group_std, kind="stable")
        n = min(num_buckets, unique.size)
        per, remainder = divmod(unique.size, n)
        for i in range(n):
            size = per + (remainder if i == n - 1 else 0)
            out[f"bucket_{i + 1}"] = bucket(order[i * per:i * per + size])
        return out
    for i, low in enumerate(FIXED_RV_EDGES):
        high = FIXED_RV_EDGES[i + 1] if i + 1 < len(FIXED_RV_EDGES) else np.inf
        groups = np.nonzero((group_std >= low) & (group_std < high))[0]
        if groups.size:
            out[f"bucket_{i + 1}"] = bucket(groups[np.argsort(group_std[groups], kind="stable")])
    return out


def episode_reward_std(rewards: np.ndarray, group_ids: np.ndarray, valid: np.ndarray | None = None) -> np.ndarray:
    """Each episode's in-group reward std [N] from episode rewards [N] and group ids [N]: the unbiased std
    (ddof=1, as RAGEN's filter) over the valid members of its group; 0 for a group with fewer than two (the
    filter's rule for a group that env failures broke). A row's value is its episode's: `std[row_episode_ids]`."""
    rewards = np.asarray(rewards, np.float64)
    group_ids = np.asarray(group_ids)
    valid = np.ones(rewards.shape, bool) if valid is None else np.asarray(valid, bool)
    if rewards.ndim != 1 or group_ids.shape != rewards.shape or valid.shape != rewards.shape:
        raise ValueError(f"rewards, group_ids and valid must all be [N]; got {rewards.shape}, {group_ids.shape}, "
                         f"{valid.shape}.")
    out = np.zeros(rewards.shape)
    for gid in np.unique(group_ids):
        members = (group_ids == gid) & valid
        if members.sum() >= 2:
            out[group_ids == gid] = rewards[members].std(ddof=1)
    return out
