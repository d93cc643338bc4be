"""RAGEN-2 diagnostics in the training loop: MI / H(Z|X) by cross-scoring, regimes, Echo-Trap warnings.

Reasoning tokens are cut from the sampled response buffers (everything before the tokens of
"</think>"), and prompts are the exact contexts the responses were sampled after: nothing is
re-tokenized.
"""

from __future__ import annotations

import functools
import logging
from collections import defaultdict

import numpy as np

from ragen_jax.diagnostics import (FIRST_TURN, CollapseConfig, RolloutPairs, collapse_metrics, cross_score,
                                   echo_trap_warnings, should_compute)
from ragen_jax.diagnostics.plots import curves_image, regime_plane_image
from ragen_jax.rollout.types import Episode

logger = logging.getLogger(__name__)


def _find(seq: list[int], pattern: list[int]) -> int:
    n = len(pattern)
    for i in range(len(seq) - n + 1):
        if seq[i:i + n] == pattern:
            return i
    return -1


def reasoning_tokens(response: list[int], think_close: list[int]) -> list[int]:
    """The sampled tokens between the prompt's "<think>" and "</think>" ([] if never closed)."""
    end = _find(response, think_close)
    return response[:end] if end >= 0 else []


def rollout_pairs(episodes: list[Episode], think_close: list[int]) -> RolloutPairs:
    """Token-level (prompt, reasoning) pairs per turn of every episode."""
    turn_prompts, turn_reasonings = [], []
    for ep in episodes:
        done = [r for r in ep.history if r.response_tokens is not None and r.context_tokens is not None]
        turn_prompts.append([list(map(int, r.context_tokens)) for r in done])
        turn_reasonings.append([reasoning_tokens(r.response_tokens, think_close) for r in done])
    return RolloutPairs(
        first_turn_prompts=[p[0] if p else [] for p in turn_prompts],
        first_turn_reasonings=[z[0] if z else [] for z in turn_reasonings],
        group_ids=[ep.group_id for ep in episodes],
        turn_prompts=turn_prompts, turn_reasonings=turn_reasonings)


class CollapseMonitor:
    """Runs the MI diagnostics every k steps and the Echo-Trap checks every step."""

    def __init__(self, cfg, tokenizer, monitor):
        d = cfg.diagnostics
        self.enabled_mi = d.every > 0 and cfg.rollout.enable_think
        self.config = CollapseConfig(
            compute_freq=max(d.every, 1), first_turn_enabled=d.first_turn, multi_turn_enabled=d.trajectory,
            num_samples=d.max_pairs, ema_decay=d.ema_decay,
            thresholds={"conditional_entropy": d.entropy_threshold, "mi": d.mi_threshold,
                        "mi_relative": d.mi_relative})
        self.batch_size = d.batch_size
        self.warnings_on = d.warnings
        self.tokenizer = tokenizer
        self.think_close = tokenizer.encode("</think>")
        self.monitor = monitor
        self.ema: dict = {}
        self.path: list[tuple[int, float, float, float]] = []  # (step, H(Z|X), MI, log N)
        self.histories: dict[str, list[float]] = defaultdict(list)

    def state(self) -> dict:
        return {"ema": {k: list(v) for k, v in self.ema.items()}, "path": self.path,
                "histories": dict(self.histories)}

    def load_state(self, state: dict) -> None:
        self.ema = {k: tuple(v) for k, v in state.get("ema", {}).items()}
        self.path = [tuple(p) for p in state.get("path", [])]
        self.histories = defaultdict(list, {k: list(v) for k, v in state.get("histories", {}).items()})

    def mi_metrics(self, step: int, episodes: list[Episode], graphdef, params) -> dict[str, float]:
        if not (self.enabled_mi and should_compute(step, self.config)):
            return {}
        score = functools.partial(cross_score, graphdef, params, pad_id=self.tokenizer.pad_token_id,
                                  batch_size=self.batch_size)
        rng = np.random.default_rng([step, 7])
        metrics, self.ema = collapse_metrics(rollout_pairs(episodes, self.think_close), score, self.config,
                                             rng, self.ema)
        h = metrics.get(f"{FIRST_TURN}/conditional_entropy_est")
        mi = metrics.get(f"{FIRST_TURN}/mi_estimate")
        if h is not None and mi is not None:
            self.path.append((step, float(h), float(mi), float(metrics.get(f"{FIRST_TURN}/mi_upper_bound", 0.0))))
            self._images(step)
        return metrics

    def _images(self, step: int) -> None:
        steps, h, mi, bound = (list(x) for x in zip(*self.path))
        th = self.config.thresholds
        self.monitor.image("collapse/regime_plane", regime_plane_image(h, mi, steps, thresholds=th,
                                                                       mi_upper_bound=bound[-1]), step)
        self.monitor.image("collapse/mi_and_conditional_entropy", curves_image(steps, mi, h, bound), step)

    def warnings(self, metrics: dict[str, float]) -> dict[str, float]:
        if not self.warnings_on:
            return {}
        for key in ("rollout/in_group_reward_std", "actor/entropy", "actor/grad_norm"):
            if key in metrics:
                self.histories[key].append(float(metrics[key]))
        messages, flags = echo_trap_warnings(self.histories)
        for m in messages:
            logger.warning("Echo-Trap warning: %s", m)
        return flags
