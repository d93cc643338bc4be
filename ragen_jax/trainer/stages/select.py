"""Stage 2, select: RAGEN-2's SNR filter over the step's groups, with episodes whose env failed left out, and the
rows that will train."""

from __future__ import annotations

import dataclasses
from typing import Callable

import numpy as np

from ragen_jax.filtering import FilterConfig, FilterResult, episode_values, filter_rollouts, metric_quantity
from ragen_jax.rollout.types import RolloutResult


@dataclasses.dataclass
class Selection:
    """Which groups and rows a step trains: the filter's result, the episodes whose env did not fail [N], the
    batch rows of kept healthy episodes [R], and the selection's metrics."""

    filter: FilterResult
    ok: np.ndarray
    rows: np.ndarray
    metrics: dict[str, float]

    @property
    def empty(self) -> bool:
        return self.filter.empty

    @property
    def in_group_std(self) -> float | None:
        """The kept groups' mean in-group reward std (RAGEN's), None when not reported."""
        return self.filter.metrics.get("rollout/in_group_reward_std", None)


def select(result: RolloutResult, group_size: int, config: FilterConfig,
           score_entropy: Callable[[dict], np.ndarray] | None = None) -> Selection:
    """Filter the step's groups; `score_entropy(arrays) -> [rows, T]` scores token entropies under the current
    policy for a filter metric that reads entropy (RAGEN's EntropyRolloutFilter)."""
    episodes = result.episodes
    rewards = np.array([ep.total_reward for ep in episodes], np.float32)
    ok = np.array([not ep.error for ep in episodes], bool)  # an episode whose env failed never trains
    fres = filter_rollouts(rewards, group_size, config, valid=ok,
                           **filter_inputs(result, metric_quantity(config.metric), score_entropy))
    metrics = {"rollout/env_error_ratio": float(1.0 - ok.mean()), **fres.metrics}
    kept = fres.kept_traj[ok[fres.kept_traj]]
    rows = np.nonzero(np.isin(result.batch.episode_ids, kept))[0]
    return Selection(fres, ok, rows, metrics)


def filter_inputs(result: RolloutResult, quantity: str,
                  score_entropy: Callable[[dict], np.ndarray] | None) -> dict[str, np.ndarray]:
    """Per-trajectory length or entropy [N] for a filter metric that reads them (RAGEN's LengthRolloutFilter /
    EntropyRolloutFilter): trained tokens summed over an episode's rows; each row's mean token entropy under
    the current policy (the log-probs' temperature), averaged over the episode's rows."""
    if quantity == "reward":
        return {}
    batch, n = result.batch, len(result.episodes)
    mask = batch.loss_mask > 0
    if quantity == "length":
        return {"length": episode_values(mask.sum(axis=1), batch.episode_ids, n, "sum")}
    from ragen_jax.trainer.steps import scored_positions

    ent = score_entropy({"tokens": batch.tokens, "attention_mask": batch.attention_mask,
                         "positions": scored_positions(batch.loss_mask)})
    row = (ent * mask).sum(axis=1) / np.maximum(mask.sum(axis=1), 1)
    return {"entropy": episode_values(row, batch.episode_ids, n, "mean")}
