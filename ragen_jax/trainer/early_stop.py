"""When a run stops early, as pure functions of the run's state and what its latest step measured.

RAGEN's stops (reward-variance collapse, the filter keeping nothing) and ours (a diverged policy, validation
that stays at zero, updates skipped for non-finite values); each returns the reason the run prints, or None.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Mapping

import numpy as np

from ragen_jax.filtering import update_empty_streak
from ragen_jax.trainer.state import RunState


def reward_collapse(first: list[float], recent: list[float], std: float, window: int,
                    ratio: float) -> tuple[list[float], list[float], bool]:
    """RAGEN's reward-variance early stop, one trained step at a time: the in-group reward std of the first
    `window` steps make the baseline (their mean); after it, collapse is `window` steps in a row below
    ratio x baseline. -> (first, recent, collapsed); window 0 is off."""
    if window <= 0:
        return first, recent, False
    if len(first) < window:
        return first + [std], [], False
    recent = (recent + [std])[-window:]
    return first, recent, collapsed(first, recent, window, ratio)


def zero_std_streak(streak: int, in_group_std: float | None, measured: bool) -> int:
    """The zero in-group reward std streak after a step whose std is `in_group_std` (None: not reported).
    `measured`: some group had the healthy members to measure one; a step where env failures left none (its std
    reads 0 by definition) neither counts nor resets the streak."""
    if not measured:
        return streak
    return streak + 1 if in_group_std is not None and in_group_std <= 1e-8 else 0


def collapsed(first: list[float], recent: list[float], window: int, ratio: float) -> bool:
    """The reward-variance stop's verdict on its state: the last `window` stds of `recent` all below ratio x the
    mean of the first `window` of `first` (False while either is shorter, or with window 0)."""
    if window <= 0 or len(first) < window or len(recent) < window:
        return False
    return max(recent[-window:]) < ratio * float(np.mean(first[:window]))


def after_selection(state: RunState, selection: Any, es: Any, empty_stop_steps: int) -> tuple[dict[str, float],
                                                                                               str | None]:
    """Count a step's selection into the run's state (steps run, kept ratio, the empty-filter, zero-std and
    reward-collapse streaks) -> (its metrics, why the step trains nothing: "empty" or "reward_collapse", else None).
    RAGEN stops before a collapsed step's update: the collapsed rollout is not trained on."""
    fres = selection.filter
    state.steps_run += 1
    state.kept_ratio_sum += fres.kept_ratio
    state.empty_streak, stop_empty, metrics = update_empty_streak(state.empty_streak, fres, empty_stop_steps)
    std = selection.in_group_std
    state.std_zero_streak = zero_std_streak(state.std_zero_streak, std, measured=fres.measured_groups > 0)
    metrics["early_stop/filter_empty"] = float(stop_empty)
    if fres.empty:
        return metrics, "empty"
    if std is not None:
        state.reward_std_first, state.reward_std_recent, collapse = reward_collapse(
            state.reward_std_first, state.reward_std_recent, float(std), es.reward_collapse_window,
            es.reward_collapse_ratio)
        metrics["early_stop/reward_collapse"] = float(collapse)
        if collapse:
            return metrics, "reward_collapse"
    return metrics, None


@dataclasses.dataclass(frozen=True)
class StepSignals:
    """What a step measured that its early-stop verdict reads besides the run's state (a checkpoint keeps it, so a
    resume judges its step as the run did): the share of episodes whose env failed and the policy's KL."""

    env_error_ratio: float | None = None
    ppo_kl: float | None = None  # actor/ppo_kl
    kl_loss: float | None = None  # actor/kl_loss

    METRICS = {"env_error_ratio": "rollout/env_error_ratio", "ppo_kl": "actor/ppo_kl", "kl_loss": "actor/kl_loss"}

    @classmethod
    def of(cls, metrics: Mapping[str, float]) -> "StepSignals":
        """The signals of a step's metrics (or of a checkpoint's `stop_metrics`, which use the metric names)."""
        return cls(**{k: float(metrics[name]) for k, name in cls.METRICS.items() if name in metrics})

    def to_meta(self) -> dict[str, float]:
        return {name: getattr(self, k) for k, name in self.METRICS.items() if getattr(self, k) is not None}


def early_stop_reason(state: RunState, signals: StepSignals, es: Any, empty_stop_steps: int) -> str | None:
    """Why the run stops after its latest step, or None. es: the config's trainer.early_stop section;
    empty_stop_steps: filter.empty_stop_steps (0 = off)."""
    if empty_stop_steps > 0 and state.empty_streak >= empty_stop_steps:
        if signals.env_error_ratio == 1.0:
            return (f"every episode's environment failed, {empty_stop_steps} steps in a row "
                    "(nothing to train on; the warnings above show the errors)")
        return f"the filter kept nothing for {empty_stop_steps} steps in a row"
    if collapsed(state.reward_std_first, state.reward_std_recent, es.reward_collapse_window,
                 es.reward_collapse_ratio):
        return (f"the in-group reward std collapsed: {es.reward_collapse_window} steps in a row below "
                f"{es.reward_collapse_ratio:g} x its mean over the first trained steps "
                f"({np.mean(state.reward_std_first):.4g})")
    if es.reward_std_patience and state.std_zero_streak >= es.reward_std_patience:
        return f"in-group reward std was zero for {es.reward_std_patience} steps in a row"
    streaks = state.val_low_streaks  # per validation env
    worst = max(streaks, key=streaks.get, default=None)
    if es.val_patience and worst is not None and streaks[worst] >= es.val_patience:
        where = f" on {worst}" if len(streaks) > 1 else ""
        return f"validation success{where} stayed below {es.val_success_below} {es.val_patience} times in a row"
    if es.skipped_updates and state.skipped_in_a_row >= es.skipped_updates:
        return (f"{state.skipped_in_a_row} updates in a row were skipped for non-finite values "
                "(lower optim.*.lr or check the rewards)")
    if es.max_policy_kl:
        for name, value in (("actor/ppo_kl", signals.ppo_kl), ("actor/kl_loss", signals.kl_loss)):
            if value is not None and not np.abs(value) <= es.max_policy_kl:
                return (f"the policy diverged: {name} = {value:.4g} > trainer.early_stop.max_policy_kl "
                        f"{es.max_policy_kl:g}")
    return None
