"""The run's bookkeeping as one typed value: what the early stops, the summary and a resume read.

A checkpoint's meta keeps it (`to_meta` / `from_meta`) in the layout earlier checkpoints used, so a resume restores
every counter, streak and the validation history exactly.
"""

from __future__ import annotations

import dataclasses
from typing import Any

# the checkpoint meta's "counters" keys, in RunState's names
COUNTERS = ("empty_streak", "val_low_streaks", "std_zero_streak", "skipped_in_a_row", "updates_applied",
            "updates_skipped", "steps_run", "kept_ratio_sum", "actor_update_steps", "critic_update_steps",
            "checkpoint_save_failures", "kl_in_reward_coef", "reward_std_first", "reward_std_recent",
            "rollout_index")


@dataclasses.dataclass
class RunState:
    """Counters, streaks and history of a run (one instance per Trainer, changed after every step)."""

    kl_in_reward_coef: float  # the KL-in-reward coefficient for the next step (fixed, or the adaptive controller's)
    steps_run: int = 0
    updates_applied: int = 0
    updates_skipped: int = 0
    skipped_in_a_row: int = 0  # updates skipped for non-finite values, in a row
    kept_ratio_sum: float = 0.0  # the filter's kept ratios summed over the steps run
    actor_update_steps: int = 0  # RL steps each model trained on (their lr schedules' positions)
    critic_update_steps: int = 0
    checkpoint_save_failures: int = 0
    empty_streak: int = 0  # steps in a row where the filter kept nothing
    std_zero_streak: int = 0  # steps in a row of zero in-group reward std (among measured steps)
    val_low_streaks: dict[str, int] = dataclasses.field(default_factory=dict)  # per validation env
    reward_std_first: list[float] = dataclasses.field(default_factory=list)  # the collapse stop's baseline steps
    reward_std_recent: list[float] = dataclasses.field(default_factory=list)  # its latest window
    history: list[dict] = dataclasses.field(default_factory=list)  # one {"step", "val_success", "phase"?} each
    warmstart: dict[str, float] = dataclasses.field(default_factory=dict)  # the warm start's metrics
    last_stop_metrics: dict[str, float] = dataclasses.field(default_factory=dict)  # the latest step's (stop_metrics)
    start_step: int = 0  # the first RL step this process runs (after a resume: the checkpoint's + 1)
    rollout_index: int | None = None  # asynchronous runs: the step whose rollout the learner takes next

    @property
    def mean_kept_ratio(self) -> float | None:
        return self.kept_ratio_sum / self.steps_run if self.steps_run else None

    def count_update(self, skipped: bool) -> None:
        if skipped:
            self.updates_skipped += 1
            self.skipped_in_a_row += 1
        else:
            self.updates_applied += 1
            self.skipped_in_a_row = 0

    def record_validation(self, step: int, metrics: dict[str, float], tags: list[str], below: float,
                          streak: bool = True, phase: str | None = None) -> None:
        """The history follows the first validation env (`tags[0]`); the low-success streak is counted per env
        (RAGEN), over the validations after RL steps (`streak`): RAGEN's validation before training does not count,
        nor one where every episode of the env failed (a dead env server is not a policy that fails)."""
        for tag in tags if streak else ():
            if metrics.get(f"val/{tag}/env_error", 0.0) >= 1.0:
                continue  # every episode's env failed: no word on the policy, so the streak neither grows nor ends
            low = metrics.get(f"val/{tag}/success", 0.0) < below
            self.val_low_streaks[tag] = self.val_low_streaks.get(tag, 0) + 1 if low else 0
        entry = {"step": step, "val_success": metrics.get(f"val/{tags[0]}/success", 0.0)}
        self.history.append(entry if phase is None else {**entry, "phase": phase})

    # ------------------------------------------------------------------ checkpoints
    def counters(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in COUNTERS}

    def to_meta(self, step: int) -> dict[str, Any]:
        """What a checkpoint's meta keeps of the run (besides the models and the diagnostics' state)."""
        return {"step": step, "counters": self.counters(), "history": self.history, "warmstart": self.warmstart,
                "stop_metrics": self.last_stop_metrics}

    def load_meta(self, meta: dict[str, Any], critic_warmup: int) -> None:
        """Take a checkpoint's meta; the next step to run follows its step."""
        counters = dict(meta["counters"])
        if "actor_update_steps" not in counters:  # saved before the schedules counted updates: every step until
            done = int(meta["step"]) + 1           # then had trained
            counters.update(actor_update_steps=max(done - critic_warmup, 0), critic_update_steps=done)
        for name in COUNTERS:
            if name in counters:
                setattr(self, name, counters[name])
        self.history = list(meta.get("history", []))
        self.warmstart = dict(meta.get("warmstart") or {})
        self.last_stop_metrics = dict(meta.get("stop_metrics") or {})
        self.start_step = int(meta["step"]) + 1
