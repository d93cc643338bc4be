"""The rollout filter as one call: score groups, select, report RAGEN's metrics.

`filter_rollouts` runs on the host (arrays of a few hundred numbers); the trainer then gathers
the kept trajectories with `compact` so dropped groups cost no update compute.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Mapping

import numpy as np

from ragen_jax.filtering.scores import canonical_metric, group_scores, metric_quantity
from ragen_jax.filtering.select import PROB_MODES, STRATEGIES, ZERO_TOL, select_groups

LOSS_SCALINGS = ("none", "linear", "sqrt")


@dataclasses.dataclass(frozen=True)
class FilterConfig:
    """Filter options; names follow RAGEN's `rollout_filter_*` keys (see from_mapping)."""

    strategy: str = "top_p"  # rollout_filter_strategy
    value: float = 1.0  # rollout_filter_value (1.0 with top_p = no filtering)
    metric: str = "reward_variance"  # rollout_filter_metric
    include_zero: bool = True  # rollout_filter_include_zero
    prob_mode: str = "linear"  # rollout_filter_top_p_prob_mode
    selection_eps: float = 0.01  # rollout_filter_selection_eps
    largest: bool = True  # rollout_filter_type == "largest"
    loss_scaling: str = "none"  # actor.filter_loss_scaling
    empty_stop_steps: int = 5  # rollout_filter_empty_stop_steps (0 disables the early stop)

    def __post_init__(self) -> None:
        if self.strategy not in STRATEGIES:
            raise ValueError(f"filter strategy {self.strategy!r} not in {STRATEGIES}.")
        if self.prob_mode not in PROB_MODES:
            raise ValueError(f"filter prob_mode {self.prob_mode!r} not in {PROB_MODES}.")
        if self.loss_scaling not in LOSS_SCALINGS:
            raise ValueError(f"filter loss_scaling {self.loss_scaling!r} not in {LOSS_SCALINGS}.")
        object.__setattr__(self, "metric", canonical_metric(self.metric))  # RAGEN's spellings, one name
        for name in ("value", "selection_eps", "empty_stop_steps"):
            if not getattr(self, name) >= 0:
                raise ValueError(f"filter {name} must be >= 0 (got {getattr(self, name)}).")

    @classmethod
    def from_mapping(cls, cfg: Mapping[str, Any]) -> "FilterConfig":
        """Build from a dict / ConfigDict; accepts our field names or RAGEN's key names."""
        aliases = {
            "rollout_filter_strategy": "strategy",
            "rollout_filter_value": "value",
            "rollout_filter_metric": "metric",
            "rollout_filter_include_zero": "include_zero",
            "rollout_filter_top_p_prob_mode": "prob_mode",
            "top_p_prob_mode": "prob_mode",
            "rollout_filter_selection_eps": "selection_eps",
            "filter_loss_scaling": "loss_scaling",
            "rollout_filter_empty_stop_steps": "empty_stop_steps",
        }
        fields = {f.name for f in dataclasses.fields(cls)}
        kwargs: dict[str, Any] = {}
        cfg = dict(cfg)
        if "rollout_filter_ratio" in cfg:  # RAGEN's older name for the value, read only when the value is absent
            ratio = cfg.pop("rollout_filter_ratio")
            if not {"rollout_filter_value", "value"} & cfg.keys():
                cfg["rollout_filter_value"] = ratio
        for key, val in cfg.items():
            if key in ("rollout_filter_type", "filter_type", "type"):
                if val not in ("largest", "smallest"):
                    raise ValueError(f"filter type {val!r} must be 'largest' or 'smallest'.")
                kwargs["largest"] = val == "largest"
                continue
            name = aliases.get(key, key)
            if name not in fields:
                raise ValueError(f"Unknown filter option {key!r}; known: {sorted(fields)}.")
            kwargs[name] = val
        return cls(**kwargs)

    @property
    def is_noop(self) -> bool:
        """True when the config keeps every group whatever the scores."""
        return self.strategy == "top_p" and self.value >= 1.0 and self.include_zero


@dataclasses.dataclass(frozen=True)
class FilterResult:
    """Outcome of one filter call; `kept_traj` indexes the unfiltered trajectory axis."""

    kept_groups: np.ndarray  # [K] sorted group indices
    kept_traj: np.ndarray  # [K * group_size] sorted trajectory indices
    scores: np.ndarray  # [G] selection scores
    num_groups: int
    metrics: dict[str, float]
    measured_groups: int  # groups with the healthy members to measure an in-group std (env failures can break one)

    @property
    def kept_ratio(self) -> float:
        return self.kept_groups.size / self.num_groups

    @property
    def empty(self) -> bool:
        return self.kept_groups.size == 0


def _chosen_mean(values: np.ndarray, kept: np.ndarray) -> float:
    return float(values[kept].mean()) if kept.size else 0.0


def filter_metrics(
    stats: Mapping[str, np.ndarray], quantity: str, scores: np.ndarray, kept: np.ndarray,
    measured: np.ndarray | None = None,
) -> dict[str, float]:
    """RAGEN's `rollout/*` filter metrics, before (in_group_*) and after (chosen_in_group_*).

    Each in_group_* figure averages the groups where it is defined: mean/max/sum over groups with a member that
    counts (stats["count"] > 0), the std and the zero count over `measured` [G] bool (default: the same groups).
    A group that env failures left with one healthy member has std 0 by definition, not by its rewards: left
    out, so failures cannot fake a reward collapse. Without any such group a figure is 0.
    """
    has_data = np.asarray(stats["count"]) > 0 if "count" in stats else np.ones(scores.shape, bool)
    defined = {"data": np.nonzero(has_data)[0],
               "std": np.nonzero(has_data if measured is None else np.asarray(measured, bool))[0]}
    metrics: dict[str, float] = {}
    base_keys = ("std", "max", "mean")
    keys = base_keys + (("sum",) if quantity == "reward" else ())
    for name, key in [(key, key) for key in base_keys] + [(f"{quantity}_{key}", key) for key in keys]:
        groups = defined["std" if key == "std" else "data"]
        metrics[f"rollout/in_group_{name}"] = _chosen_mean(stats[key], groups)
        metrics[f"rollout/chosen_in_group_{name}"] = _chosen_mean(stats[key], kept)
    metrics["rollout/filter_kept_count"] = float(kept.size)
    metrics["rollout/filter_kept_ratio"] = kept.size / scores.size
    metrics["rollout/filter_zero_count"] = float(np.sum(np.abs(scores[defined["std"]]) <= ZERO_TOL))
    return metrics


def groups_to_rows(kept_groups: np.ndarray, row_group: np.ndarray) -> np.ndarray:
    """Sorted row indices whose group id [R] is kept; rows may be trajectories or turns."""
    return np.nonzero(np.isin(np.asarray(row_group), kept_groups))[0]


def filter_rollouts(
    rewards: np.ndarray | None,
    group_size: int,
    config: FilterConfig = FilterConfig(),
    *,
    entropy: np.ndarray | None = None,
    length: np.ndarray | None = None,
    valid: np.ndarray | None = None,
) -> FilterResult:
    """Score contiguous groups of per-trajectory values [N], select groups, report metrics.

    valid [N] bool: trajectories that may train (False for an episode whose env failed): the others are
    left out of their group's score. A group that failures left with fewer than two valid members (when
    group_size >= 2) is never kept: its score and a group-relative baseline would rest on one episode
    (GRPO's rule for a group of one trains on the raw score). `kept_traj` still lists every trajectory
    of a kept group; the caller drops the invalid ones.
    """
    scores, stats = group_scores(
        rewards, group_size, config.metric, entropy=entropy, length=length, valid=valid
    )
    kept = select_groups(
        scores,
        config.strategy,
        config.value,
        include_zero=config.include_zero,
        eps=config.selection_eps,
        prob_mode=config.prob_mode,
        largest=config.largest,
    )
    healthy = stats["count"] >= min(2, group_size)
    kept = kept[healthy[kept]]
    row_group = np.arange(scores.size * group_size) // group_size
    metrics = filter_metrics(stats, metric_quantity(config.metric), scores, kept, measured=healthy)
    if valid is not None:
        metrics["rollout/groups_broken_by_env_errors"] = float(np.sum(~healthy))
    return FilterResult(
        kept_groups=kept,
        kept_traj=groups_to_rows(kept, row_group),
        scores=scores,
        num_groups=int(scores.size),
        metrics=metrics,
        measured_groups=int(healthy.sum()),
    )


def advantage_scale(kept_ratio: float, mode: str = "none") -> float:
    """Factor applied to advantages after filtering: 1, kept_ratio, or sqrt(kept_ratio)."""
    if mode not in LOSS_SCALINGS:
        raise ValueError(f"advantage scaling mode {mode!r} not in {LOSS_SCALINGS}.")
    if mode == "linear":
        return float(kept_ratio)
    if mode == "sqrt":
        return float(np.sqrt(kept_ratio))
    return 1.0


def update_empty_streak(
    streak: int, result: FilterResult, stop_steps: int
) -> tuple[int, bool, dict[str, float]]:
    """Count consecutive steps where the filter kept nothing -> (streak, stop_now, metrics).

    An empty step is skipped by the trainer; `stop_now` is the early stop once the streak reaches
    stop_steps (0 disables it). Non-empty steps reset the streak (and log it as 0, as RAGEN does).
    """
    if not result.empty:
        return 0, False, {"rollout/empty_after_filter": 0.0, "rollout/consecutive_empty_after_filter_steps": 0.0}
    streak += 1
    metrics = {
        "rollout/empty_after_filter": 1.0,
        "rollout/consecutive_empty_after_filter_steps": float(streak),
    }
    return streak, stop_steps > 0 and streak >= stop_steps, metrics
