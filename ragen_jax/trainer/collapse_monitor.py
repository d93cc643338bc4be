"""RAGEN-2 diagnostics in the training loop: MI / H(Z|X) by cross-scoring, regimes, Echo-Trap warnings.

Reasoning tokens are cut from the sampled response buffers (everything before the token where the
decoded text closes "</think>"), and prompts are the exact contexts the responses were sampled after: nothing is
re-tokenized.
"""

from __future__ import annotations

import functools
import logging
from collections import defaultdict

from ragen_jax.algos.settings import AlgoSettings
from ragen_jax.diagnostics import (FIRST_TURN, CollapseConfig, collapse_metrics, cross_score, echo_trap_warnings,
                                   should_compute)
from ragen_jax.diagnostics.pairs import rollout_pairs, step_rng
from ragen_jax.diagnostics.plots import curves_image, regime_plane_image
from ragen_jax.rollout.types import Episode

logger = logging.getLogger(__name__)


class CollapseMonitor:
    """Runs the MI diagnostics every k steps and the Echo-Trap checks every step."""

    def __init__(self, cfg, tokenizer, monitor):
        """cfg: the run's RunConfig."""
        d = cfg.diagnostics
        self.enabled_mi = d.every > 0 and cfg.rollout.enable_think
        self.config = CollapseConfig(
            compute_freq=max(d.every, 1), first_turn_enabled=d.first_turn, multi_turn_enabled=d.trajectory,
            num_samples=d.max_pairs, ema_decay=d.ema_decay, std_eps=d.std_eps,
            thresholds={"conditional_entropy": d.entropy_threshold, "mi": d.mi_threshold,
                        "mi_relative": d.mi_relative})
        self.batch_size = d.batch_size
        self.temperature = AlgoSettings.of(cfg).temperature  # the log-probs' temperature, as the update's
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
                                  batch_size=self.batch_size, temperature=self.temperature)
        rng = step_rng(step)
        pairs = rollout_pairs(episodes, self.think_close, self.tokenizer.decode)
        metrics, self.ema = collapse_metrics(pairs, score, self.config, rng, self.ema)
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
