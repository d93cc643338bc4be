"""Stage 6, report: one step's metrics under RAGEN's names, from what the other stages returned."""

from __future__ import annotations

from typing import Mapping


def step_report(*parts: Mapping[str, float], timing: Mapping[str, float]) -> dict[str, float]:
    """The step's metrics: every stage's, in stage order (a later stage's value of a name wins), then the
    `timing_s/*` seconds and `perf/*` counts."""
    metrics: dict[str, float] = {}
    for part in parts:
        metrics.update(part)
    return {**metrics, **timing}


def skipped_update(reason: str) -> dict[str, float]:
    """The metric that says why a step trained nothing: the filter kept no group ("empty"), or RAGEN's reward
    collapse stop ("reward_collapse", which RAGEN takes before the collapsed rollout trains)."""
    return {f"train/update_skipped_{reason}": 1.0}
