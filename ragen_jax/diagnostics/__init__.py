"""Reasoning-collapse diagnostics (RAGEN-2): MI proxy by cross-scoring, regimes, early warnings.

Trainer use every `compute_freq` steps::

    score = functools.partial(cross_score, graphdef, params, pad_id=pad, batch_size=32)
    if should_compute(step, cfg):
        m, ema = collapse_metrics(RolloutPairs(...token ids from the buffers...), score, cfg, rng, ema)

RAGEN-2's gradient analysis (the task / entropy / KL parts of the gradient norm per reward-variance bucket)
differentiates the update's own loss, so it lives beside it (ragen_jax/trainer/gradient_split.py); its buckets
are `variance_buckets` here.
"""

from ragen_jax.diagnostics.buckets import variance_buckets
from ragen_jax.diagnostics.collapse import (
    FIRST_TURN,
    TRAJECTORY,
    CollapseConfig,
    RolloutPairs,
    collapse_metrics,
    should_compute,
)
from ragen_jax.diagnostics.cross_score import cross_score
from ragen_jax.diagnostics.entropy import token_entropy
from ragen_jax.diagnostics.mi import matched_marginal, mi_estimates, prefix_metrics, retrieval_metrics
from ragen_jax.diagnostics.regimes import REGIMES, classify, regime_metrics
from ragen_jax.diagnostics.pair_draws import PairSample, first_turn_pairs, trajectory_uniform_pairs
from ragen_jax.diagnostics.warnings import echo_trap_warnings

__all__ = [
    "FIRST_TURN",
    "REGIMES",
    "TRAJECTORY",
    "CollapseConfig",
    "PairSample",
    "RolloutPairs",
    "classify",
    "collapse_metrics",
    "cross_score",
    "echo_trap_warnings",
    "first_turn_pairs",
    "matched_marginal",
    "mi_estimates",
    "prefix_metrics",
    "regime_metrics",
    "retrieval_metrics",
    "should_compute",
    "token_entropy",
    "trajectory_uniform_pairs",
    "variance_buckets",
]
