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
    threshold = ratio * float(np.mean(first))
    return first, recent, len(recent) == window and max(recent) < threshold


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
