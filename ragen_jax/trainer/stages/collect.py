"""Stage 1, collect: play one RL step's episodes with the current policy (StarPO's rollout)."""

from __future__ import annotations

import dataclasses
import time
from typing import Any

import jax
import numpy as np

from ragen_jax.rollout import group_seeds
from ragen_jax.rollout.types import RolloutResult


@dataclasses.dataclass
class Collected:
    """A step's rollout: its episodes and training batch, the `train/*` metrics and the stage's seconds."""

    result: RolloutResult
    metrics: dict[str, float]
    timing: dict[str, float]

    @property
    def episodes(self) -> list:
        return self.result.episodes

    @property
    def ok(self) -> np.ndarray:
        """[N] bool: the episodes whose env did not fail (a failed one never trains)."""
        return np.array([not ep.error for ep in self.result.episodes], bool)


def step_seeds(env: Any, step: int) -> tuple[np.ndarray, np.ndarray]:
    """(seeds, group ids) [groups x group_size] of RL step `step`: env.train_seed advances by env.groups a step, so a
    resumed run plays the levels the uninterrupted one would have."""
    return group_seeds(env.train_seed + step * env.groups, env.groups, env.group_size)


def collect(engine, params: Any, env_batch, env: Any, step: int, key: jax.Array, *, tag: str,
            row_multiple: int, weights: Any = None, rows: slice | None = None) -> Collected:
    """Play step `step`'s episodes (env: the config's env section) with `params`, or with the newest weights of
    `weights` (a rollout.continuous.WeightSource, read between decode chunks); rows padded to a multiple of
    `row_multiple` (whole mini-batches even when nothing is filtered). rows: only those episodes of the step (one
    host's share: `merge_collected` joins the hosts')."""
    t0 = time.perf_counter()
    seeds, gids = step_seeds(env, step)
    extra = {} if weights is None else {"weights": weights}
    if rows is not None and (rows.start, rows.stop) != (0, len(seeds)):
        seeds, gids = seeds[rows], gids[rows]
        extra["first_episode"] = rows.start
    result = engine.run(params, env_batch, seeds, gids, key, tag=tag, row_multiple=row_multiple, **extra)
    timing = {"timing_s/rollout": time.perf_counter() - t0}
    timing.update({f"timing_s/rollout_{k}": v for k, v in result.timing.items()})
    return Collected(result, {f"train/{k}": v for k, v in result.metrics.items()}, timing)
