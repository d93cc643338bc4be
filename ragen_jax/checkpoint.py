"""Orbax checkpoints of everything a run needs to resume exactly.

Saved per step: the actor's and critic's trainable state and optimizer states (a pytree, with
Orbax's sharded-array support) plus JSON metadata (step, counters, early-stop and diagnostic
state). Rollout keys and seeds are derived from the step, so restoring the step restores them.
"""

from __future__ import annotations

import os
from typing import Any

import jax
import orbax.checkpoint as ocp

from ragen_jax.trainer.optim import all_finite


_all_finite = jax.jit(all_finite)  # one replicated bool, computed where the shards live (any number of hosts)


def finished_steps(directory: str) -> list[int]:
    """The finished checkpoint steps in a checkpoints folder, oldest first (no Orbax call: cheap, before any setup)."""
    if not os.path.isdir(directory):
        return []
    return sorted(int(n) for n in os.listdir(directory) if n.isdigit() and os.path.isdir(os.path.join(directory, n)))


def earlier_run_error(directory: str) -> str | None:
    """The error of a fresh run (or warm start) that would write into `directory` holding an earlier run's
    checkpoints (Orbax skips a step it already holds, so the two runs' checkpoints would mix), else None."""
    steps = finished_steps(directory)
    if not steps:
        return None
    return (f"{directory} already holds checkpoints {steps} of an earlier run, which this run would overwrite or "
            "mix with its own. Continue that run with --config.trainer.resume=True, evaluate it with --mode=eval, "
            "give this run another --workdir, or delete that folder to start over.")


class Checkpointer:
    """Save/restore numbered checkpoints under `directory` (only process 0 writes metadata)."""

    def __init__(self, directory: str, *, max_to_keep: int | None = 2):
        """Nothing is created until the first save (an evaluation or a fresh run leaves no empty folder)."""
        self.directory = os.path.abspath(directory)
        self.max_to_keep = max_to_keep
        self._manager: ocp.CheckpointManager | None = None

    @property
    def manager(self) -> ocp.CheckpointManager:
        if self._manager is None:
            options = ocp.CheckpointManagerOptions(max_to_keep=self.max_to_keep, create=True)
            self._manager = ocp.CheckpointManager(self.directory, options=options)
        return self._manager

    def latest_step(self) -> int | None:
        if self._manager is None and not os.path.isdir(self.directory):
            return None
        return self.manager.latest_step()

    def save(self, step: int, state: Any, meta: dict) -> None:
        """state: a pytree of arrays; meta: JSON-serialisable dict. Refuses non-finite params."""
        if not bool(_all_finite(state)):
            raise FloatingPointError(f"Refusing to write checkpoint {step}: state holds NaN/inf.")
        saved = self.manager.save(step, args=ocp.args.Composite(state=ocp.args.StandardSave(state),
                                                                meta=ocp.args.JsonSave(meta)))
        self.manager.wait_until_finished()
        if not saved:  # Orbax declines a step at or below its latest one without a word
            raise FileExistsError(f"Checkpoint {step} was not written: "
                                  f"{earlier_run_error(self.directory) or self.directory + ' holds a later step.'}")

    def restore(self, step: int, abstract_state: Any) -> tuple[Any, dict]:
        """Restore `step` into the structure (and shardings) of `abstract_state`."""
        restored = self.manager.restore(step, args=ocp.args.Composite(
            state=ocp.args.StandardRestore(abstract_state), meta=ocp.args.JsonRestore()))
        return restored["state"], restored["meta"]

    def restore_meta(self, step: int) -> dict:
        """Only the JSON metadata of `step` (to learn what its state holds before restoring it)."""
        return self.manager.restore(step, args=ocp.args.Composite(meta=ocp.args.JsonRestore()))["meta"]

    def close(self) -> None:
        if self._manager is not None:
            self._manager.close()
