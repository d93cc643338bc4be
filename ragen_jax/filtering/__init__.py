"""SNR-adaptive rollout filter (RAGEN-2): keep the groups whose rewards still carry signal.

Typical trainer use::

    result = filter_rollouts(total_rewards, group_size, FilterConfig(strategy="top_p", value=0.9,
                                                                     include_zero=False))
    metrics.update(result.metrics)
    if result.empty: skip the step (see update_empty_streak)
    batch, row_valid = compact(batch, result.kept_traj, multiple=mini_batch_size)
    advantages *= advantage_scale(result.kept_ratio, config.loss_scaling)
"""

from ragen_jax.filtering.compact import bucket_size, compact
from ragen_jax.filtering.filter import (
    LOSS_SCALINGS,
    FilterConfig,
    FilterResult,
    advantage_scale,
    filter_metrics,
    filter_rollouts,
    groups_to_rows,
    update_empty_streak,
)
from ragen_jax.filtering.scores import (FILTER_METRICS, METRICS, QUANTITIES, FilterMetric, episode_values, group_scores,
                                       group_stats, metric_quantity)
from ragen_jax.filtering.select import PROB_MODES, STRATEGIES, select_groups

__all__ = [
    "FILTER_METRICS",
    "LOSS_SCALINGS",
    "METRICS",
    "QUANTITIES",
    "FilterMetric",
    "PROB_MODES",
    "STRATEGIES",
    "FilterConfig",
    "FilterResult",
    "advantage_scale",
    "bucket_size",
    "compact",
    "episode_values",
    "filter_metrics",
    "filter_rollouts",
    "group_scores",
    "group_stats",
    "groups_to_rows",
    "metric_quantity",
    "select_groups",
    "update_empty_streak",
]
