"""When a run stops early, as pure functions of the step's metrics and the trainer's counters.

RAGEN's stops (reward-variance collapse, the filter keeping nothing) and ours (a diverged policy, validation
that stays at zero, updates skipped for non-finite values); each returns the reason the run prints, or None.
"""

from __future__ import annotations

from typing import Any, Mapping

import numpy as np


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


def early_stop_reason(metrics: Mapping[str, float], counters: Mapping[str, Any], es: Any,
                      empty_stop_steps: int) -> str | None:
    """Why the run stops after this step, or None. es: the config's trainer.early_stop block; counters: the
    trainer's (std_zero_streak, val_low_streaks, skipped_in_a_row, reward_std_first)."""
    if metrics.get("early_stop/filter_empty"):
        if metrics.get("rollout/env_error_ratio") == 1.0:
            return (f"every episode's environment failed, {empty_stop_steps} steps in a row "
                    "(nothing to train on; the warnings above show the errors)")
        return f"the filter kept nothing for {empty_stop_steps} steps in a row"
    if metrics.get("early_stop/reward_collapse"):
        first = counters["reward_std_first"]
        return (f"the in-group reward std collapsed: {es.reward_collapse_window} steps in a row below "
                f"{es.reward_collapse_ratio:g} x its mean over the first trained steps ({np.mean(first):.4g})")
    if es.reward_std_patience and counters["std_zero_streak"] >= es.reward_std_patience:
        return f"in-group reward std was zero for {es.reward_std_patience} steps in a row"
    streaks = counters["val_low_streaks"]  # per validation env
    worst = max(streaks, key=streaks.get, default=None)
    if es.val_patience and worst is not None and streaks[worst] >= es.val_patience:
        where = f" on {worst}" if len(streaks) > 1 else ""
        return f"validation success{where} stayed below {es.val_success_below} {es.val_patience} times in a row"
    if es.skipped_updates and counters["skipped_in_a_row"] >= es.skipped_updates:
        return (f"{counters['skipped_in_a_row']} updates in a row were skipped for non-finite values "
                "(lower optim.*.lr or check the rewards)")
    if es.max_policy_kl:
        for name in ("actor/ppo_kl", "actor/kl_loss"):
            value = metrics.get(name)
            if value is not None and not np.abs(value) <= es.max_policy_kl:
                return (f"the policy diverged: {name} = {value:.4g} > trainer.early_stop.max_policy_kl "
                        f"{es.max_policy_kl:g}")
    return None


# the step metrics early_stop_reason reads, besides the counters: what a checkpoint keeps of its step
STOP_METRICS = ("rollout/env_error_ratio", "actor/ppo_kl", "actor/kl_loss")


def stop_metrics(metrics: Mapping[str, float]) -> dict[str, float]:
    """The metrics of a step that its early-stop verdict reads beyond the counters (a checkpoint's meta keeps them,
    so a resume judges its step as the run did)."""
    return {k: float(metrics[k]) for k in STOP_METRICS if k in metrics}


def resumed_stop_reason(saved: Mapping[str, float], counters: Mapping[str, Any], es: Any,
                        empty_stop_steps: int) -> str | None:
    """Why the run that wrote a checkpoint stops after its step under this config's stops, or None to train on:
    `early_stop_reason` on the step's `saved` stop metrics, with the empty-filter and reward-collapse verdicts
    taken again from the counters (so a stop turned off or loosened since lets the resume go on)."""
    metrics = dict(saved)
    metrics["early_stop/filter_empty"] = float(empty_stop_steps > 0 and counters["empty_streak"] >= empty_stop_steps)
    metrics["early_stop/reward_collapse"] = float(collapsed(counters["reward_std_first"], counters["reward_std_recent"],
                                                            es.reward_collapse_window, es.reward_collapse_ratio))
    return early_stop_reason(metrics, counters, es, empty_stop_steps)
