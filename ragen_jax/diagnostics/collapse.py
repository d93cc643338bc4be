"""One collapse-diagnostics pass: sample pairs, cross-score, estimate MI, classify the regime.

Used by the trainer every `compute_freq` steps and by the offline CLI, so both report the same
metrics under RAGEN's names (`collapse_first_turn_sample/*`, `collapse_trajectory_sample/*`,
`collapse/first_turn_*`, `timing_s/collapse_*`). RAGEN computes it only for context_window_mode == "full";
here any context mode works: prompts are the contexts the model actually saw before each reasoning.
"""

from __future__ import annotations

import dataclasses
import time
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from ragen_jax.diagnostics.mi import mi_estimates, prefix_metrics
from ragen_jax.diagnostics.regimes import regime_metrics
from ragen_jax.diagnostics.pair_draws import PairSample, first_turn_pairs, trajectory_uniform_pairs

FIRST_TURN = "collapse_first_turn_sample"
TRAJECTORY = "collapse_trajectory_sample"
# (prompts [C], reasonings [R]) -> (L_mean [R, C], L_sum [R, C]); e.g. a partial of cross_score.
ScoreFn = Callable[[list[list[int]], list[list[int]]], tuple[np.ndarray, np.ndarray]]


@dataclasses.dataclass(frozen=True)
class CollapseConfig:
    """RAGEN's `collapse_detection` block plus our regime thresholds."""

    compute_freq: int = 5
    first_turn_enabled: bool = True
    multi_turn_enabled: bool = True
    num_samples: int | None = 64
    std_eps: float = 1e-3
    ema_decay: float = 0.9
    thresholds: Mapping[str, Any] | None = None


def should_compute(step: int, config: CollapseConfig) -> bool:
    """Step 1, then every compute_freq steps (never step 0), when a sampling is enabled."""
    if not (config.first_turn_enabled or config.multi_turn_enabled) or step <= 0:
        return False
    return step == 1 or step % config.compute_freq == 0


@dataclasses.dataclass
class RolloutPairs:
    """What a batch offers the diagnostics, as token ids taken from the rollout buffers.

    first_turn_* are per trajectory [N]; turn_* are per trajectory, per turn with an assistant
    response (turn_prompts[m][t] = whole context before that turn's reasoning). num_failed: trajectories whose
    env failed, left out of all of these (they never train, so their reasoning says nothing of the policy's).
    """

    first_turn_prompts: Sequence[Sequence[int]]
    first_turn_reasonings: Sequence[Sequence[int]]
    group_ids: Sequence[int]
    turn_prompts: Sequence[Sequence[Sequence[int]]] | None = None
    turn_reasonings: Sequence[Sequence[Sequence[int]]] | None = None
    num_failed: int = 0


def _score_sample(
    sample: PairSample,
    score_fn: ScoreFn,
    prefix: str,
    config: CollapseConfig,
    ema: dict[str, tuple[float, float]],
) -> dict[str, float]:
    if len(sample.prompts) < 2 or not sample.reasonings:
        return {}
    L_mean, L_sum = score_fn(sample.prompts, sample.reasonings)
    metrics, ema[prefix] = mi_estimates(
        L_mean, sample.col_of_row, L_sum=L_sum, col_keys=sample.col_keys,
        ema=ema.get(prefix), ema_decay=config.ema_decay, std_eps=config.std_eps,
    )
    out = prefix_metrics(metrics, prefix)
    out.update(regime_metrics(out, prefix, config.thresholds))
    return out


def collapse_metrics(
    pairs: RolloutPairs,
    score_fn: ScoreFn,
    config: CollapseConfig,
    rng: np.random.Generator,
    ema: dict[str, tuple[float, float]] | None = None,
) -> tuple[dict[str, float], dict[str, tuple[float, float]]]:
    """All collapse metrics for one batch -> (metrics, updated EMA state per sampling)."""
    ema = dict(ema or {})
    metrics: dict[str, float] = {"collapse/num_failed_excluded": float(pairs.num_failed)}
    if config.multi_turn_enabled and pairs.turn_prompts is not None:
        start = time.perf_counter()
        valid = sum(sum(len(z) > 0 for z in zs) for zs in pairs.turn_reasonings)
        total = sum(len(zs) for zs in pairs.turn_reasonings)
        if total:
            metrics["collapse/valid_thinking_rate"] = valid / total
        sample = trajectory_uniform_pairs(
            pairs.turn_prompts, pairs.turn_reasonings, rng, config.num_samples
        )
        metrics.update(_score_sample(sample, score_fn, TRAJECTORY, config, ema))
        metrics["timing_s/collapse_multi_turn_step"] = time.perf_counter() - start
    if config.first_turn_enabled:
        start = time.perf_counter()
        total = len(pairs.first_turn_reasonings)
        valid = sum(len(z) > 0 for z in pairs.first_turn_reasonings)
        metrics["collapse/first_turn_num_total"] = float(total)
        metrics["collapse/first_turn_num_valid"] = float(valid)
        metrics["collapse/first_turn_valid_rate"] = valid / total if total else 0.0
        sample = first_turn_pairs(
            pairs.first_turn_prompts, pairs.first_turn_reasonings, pairs.group_ids, rng,
            config.num_samples,
        )
        metrics.update(_score_sample(sample, score_fn, FIRST_TURN, config, ema))
        metrics["timing_s/collapse_first_turn_step"] = time.perf_counter() - start
    return metrics, ema
