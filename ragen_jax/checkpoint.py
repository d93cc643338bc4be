"""Orbax checkpoints of everything a run needs to resume exactly.

Saved per step: the actor's and critic's trainable state and optimizer states (a pytree, with
Orbax's sharded-array support) plus JSON metadata (step, counters, early-stop and diagnostic
state). Rollout keys and seeds are derived from the step, so restoring the step restores them.
"""

from __future__ import annotations

import glob
import os
import re
import shutil
from typing import Any

import jax
import jax.numpy as jnp
import orbax.checkpoint as ocp
from absl import flags

from ragen_jax.errors import RagenError, RunFolderError
from ragen_jax.sharding.distributed import allgather_objects
from ragen_jax.optim import all_finite


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


def _key_name(key: Any) -> str:
    for attr in ("key", "idx", "name"):  # DictKey, SequenceKey / FlattenedIndexKey, GetAttrKey
        if hasattr(key, attr):
            return str(getattr(key, attr))
    return str(key)


def leaf_shapes(tree: Any) -> dict[str, tuple[int, ...]]:
    """Leaf name ("actor.model.norm.scale.value", "actor_opt.1.0.mu. ...") -> shape, for a pytree of arrays, of
    ShapeDtypeStructs or of the array metadata Orbax keeps of a saved one (the same names for the same tree)."""
    return {".".join(_key_name(k) for k in path): tuple(leaf.shape)
            for path, leaf in jax.tree_util.tree_leaves_with_path(tree)}


def leaf_dtypes(tree: Any) -> dict[str, str]:
    """Leaf name -> dtype name ("bfloat16"), for the same trees and names as `leaf_shapes`."""
    return {".".join(_key_name(k) for k in path): jnp.dtype(leaf.dtype).name
            for path, leaf in jax.tree_util.tree_leaves_with_path(tree)}


def state_differences(stored: dict[str, tuple], wanted: dict[str, tuple], limit: int = 4) -> list[str]:
    """What keeps a checkpoint's leaves (`stored`, name -> shape) from filling the state a config builds (`wanted`):
    leaves missing, extra or of another shape; at most `limit` lines and a count of the rest (empty: they fit)."""
    problems = [f"{n}: the checkpoint has shape {stored[n]}, this config builds {wanted[n]}"
                for n in sorted(wanted.keys() & stored.keys()) if tuple(stored[n]) != tuple(wanted[n])]
    problems += [f"{n}: this config builds it, the checkpoint lacks it" for n in sorted(wanted.keys() - stored.keys())]
    problems += [f"{n}: in the checkpoint, not in this config's state" for n in sorted(stored.keys() - wanted.keys())]
    return problems[:limit] + ([f"... and {len(problems) - limit} more"] if len(problems) > limit else [])


class CheckpointWriteError(RagenError, OSError):
    """A checkpoint could not be written (a full disk, a quota, a lost mount); its partial folder is removed."""


def root_cause(error: BaseException) -> str:
    """"Type: first line" of the innermost error under Orbax's wrappers; an OS error inside TensorStore's long
    message ("Failed writing: \"FILE\" ... [os_error_code='28']") is told in the OS's words: "OSError: [Errno 28]
    No space left on device: FILE"."""
    while error.__cause__ is not None:  # Orbax wraps the file's own error (TensorStore's) in its own
        error = error.__cause__
    text = str(error)
    if code := re.search(r"os_error_code='(\d+)'", text):
        file = re.findall(r'Failed \w+(?: to \w+)?: "([^"]+)"', text)
        return f"OSError: [Errno {code.group(1)}] {os.strerror(int(code.group(1)))}" + (f": {file[-1]}" if file else "")
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return f"{type(error).__name__}: {lines[0][:300] if lines else ''}"


def unreadable_checkpoint(directory: str, step: int, error: BaseException) -> str:
    """The error of checkpoint `step` in `directory` that cannot be read (damaged, or cut short by a crash or a full
    disk), with the fix."""
    cause = root_cause(error)
    folder = os.path.join(directory, str(step))
    earlier = [s for s in finished_steps(directory) if s < step]
    fix = (f"Move it aside (mv {folder} {folder}.damaged) to go on from checkpoint {earlier[-1]}, the one before "
           "it" if earlier else f"No earlier checkpoint is in {directory}: delete that folder to start over")
    return f"Checkpoint {step} in {directory} cannot be read ({cause}); it is damaged or was not completely " \
           f"written. {fix}, or give this run another --workdir."


def unwritable_checkpoint(directory: str, step: int, causes: list[str | None]) -> str:
    """The error of checkpoint `step` that could not be written into `directory`, and what is on disk instead.

    causes: per process, `root_cause` of its failed write or None (one entry with one process)."""
    steps = finished_steps(directory)
    on_disk = (f"the latest complete checkpoint is {directory}/{steps[-1]}" if steps
               else f"{directory} holds no complete checkpoint")
    told = (causes[0] if len(causes) == 1 else
            "; ".join(f"process {i}: {c}" for i, c in enumerate(causes) if c is not None)
            + " (a process whose own write worked stops waiting for the others after the barrier timeout; "
              "every process treats the save as failed)")
    return (f"Checkpoint {step} could not be written to {directory} ({told}); its partial folder was "
            f"removed and {on_disk}. Free space there (or fix its permissions or mount).")


ORBAX_BARRIER_TIMEOUT_S = 300  # Orbax's own default: how long a host waits for the slowest one at each save step


def use_distributed_barriers(timeout_s: int) -> None:
    """Make Orbax's barriers between processes the jax.distributed client's, which fail after `timeout_s`.

    Orbax 0.12 otherwise separates its save steps with device collectives that never time out: a process whose
    write failed left the others waiting in one. Its switch is an absl flag (set here without parsing the command
    line) and its timeout a module constant (no option reaches the barriers of a synchronous save)."""
    from orbax.checkpoint._src.multihost import multihost as orbax_multihost

    name = "experimental_orbax_use_distributed_barrier"
    if name not in flags.FLAGS or not hasattr(orbax_multihost, "_DEFAULT_BARRIER_TIMEOUT"):
        raise RuntimeError(f"orbax-checkpoint {ocp.__version__} lacks the --{name} flag or the barrier timeout that "
                           "coordinated multi-host checkpoints need: install the version requirements.txt pins.")
    if timeout_s <= 0:
        raise ValueError(f"The checkpoint barrier timeout must be a positive number of seconds, got {timeout_s}.")
    flags.FLAGS[name].parse(True)  # parse, not assignment: the flag is then readable before absl parses argv
    orbax_multihost._DEFAULT_BARRIER_TIMEOUT = int(timeout_s)


class Checkpointer:
    """Save/restore numbered checkpoints under `directory` (only process 0 writes metadata)."""

    def __init__(self, directory: str, *, max_to_keep: int | None = 2,
                 barrier_timeout_s: int = ORBAX_BARRIER_TIMEOUT_S):
        """Nothing is created until the first save (an evaluation or a fresh run leaves no empty folder).
        barrier_timeout_s: with several processes, how long one waits for the others at each step of a save or
        restore (the slowest host's write must fit in it) before the save fails on every process."""
        self.directory = os.path.abspath(directory)
        self.max_to_keep = max_to_keep
        self.barrier_timeout_s = barrier_timeout_s
        self._manager: ocp.CheckpointManager | None = None
        self._failed_saves = 0  # names the barriers of the next manager: a failed save leaves its keys unusable

    @property
    def manager(self) -> ocp.CheckpointManager:
        if self._manager is None:
            # synchronous: a failed write raises here, once, with nothing left running (the async manager logged each
            # writer thread's traceback and raised the failure again at the next save)
            if jax.process_count() > 1:
                use_distributed_barriers(self.barrier_timeout_s)
            # a process that skipped a barrier (its write failed) is one instance behind on that key; the same
            # keys on every process again only under a new prefix
            prefix = f"ragen_after_failed_save_{self._failed_saves}" if self._failed_saves else None
            options = ocp.CheckpointManagerOptions(
                max_to_keep=self.max_to_keep, create=True, enable_async_checkpointing=False,
                multiprocessing_options=ocp.options.MultiprocessingOptions(barrier_sync_key_prefix=prefix))
            handlers = {"state": ocp.StandardCheckpointHandler(), "meta": ocp.JsonCheckpointHandler()}
            self._manager = ocp.CheckpointManager(self.directory, options=options, item_handlers=handlers)
        return self._manager

    def latest_step(self) -> int | None:
        if self._manager is None and not os.path.isdir(self.directory):
            return None
        return self.manager.latest_step()

    def save(self, step: int, state: Any, meta: dict) -> None:
        """state: a pytree of arrays; meta: JSON-serialisable dict. Refuses non-finite params. A write that fails
        (a full disk) removes its partial folder and raises CheckpointWriteError; the next save may succeed.

        With several processes every one raises CheckpointWriteError when any one's write failed (the others
        leave Orbax's barrier after `barrier_timeout_s`, then all exchange their outcomes), so all go on alike."""
        if not bool(_all_finite(state)):
            raise FloatingPointError(f"Refusing to write checkpoint {step}: state holds NaN/inf.")
        error: Exception | None = None
        try:
            saved = self.manager.save(step, args=ocp.args.Composite(state=ocp.args.StandardSave(state),
                                                                    meta=ocp.args.JsonSave(meta)))
        except Exception as e:  # noqa: BLE001 - TensorStore's and Orbax's errors of a failed write vary by cause
            error = e
        causes = allgather_objects(None if error is None else root_cause(error))
        if any(c is not None for c in causes):
            self._remove_partial(step)  # after the exchange: no process is still writing into it
            self._failed_saves += 1
            self.close()
            raise CheckpointWriteError(unwritable_checkpoint(self.directory, step, causes)) from error
        if not saved:  # Orbax declines a step at or below its latest one without a word
            raise RunFolderError(f"Checkpoint {step} was not written: "
                                 f"{earlier_run_error(self.directory) or self.directory + ' holds a later step.'}")

    def restore(self, step: int, abstract_state: Any) -> tuple[Any, dict]:
        """Restore `step` into the structure (and shardings) of `abstract_state`; a checkpoint that does not fit it
        (another model size, LoRA rank, critic) or cannot be read is a CheckpointError saying what to do."""
        from ragen_jax.models.hf_files import CheckpointError

        problems = state_differences(leaf_shapes(self.stored_state(step)), leaf_shapes(abstract_state))
        if problems:
            run_config = os.path.join(os.path.dirname(self.directory), "config.json")
            raise CheckpointError(
                f"Checkpoint {step} in {self.directory} does not fit the model and optimizer this config builds "
                "(it was written with other model settings: model.preset/path, model.tiny.*, model.lora.rank, "
                f"algo.use_critic): {'; '.join(problems)}. Resume or evaluate it with the settings of the run that "
                f"wrote it (see {run_config}), or give this config another --workdir.")
        try:
            restored = self.manager.restore(step, args=ocp.args.Composite(
                state=ocp.args.StandardRestore(abstract_state), meta=ocp.args.JsonRestore()))
        except Exception as e:  # noqa: BLE001
            raise CheckpointError(unreadable_checkpoint(self.directory, step, e)) from e
        return restored["state"], restored["meta"]

    def stored_state(self, step: int) -> Any:
        """The metadata tree (each leaf's shape and dtype, no array read) of the model state checkpoint `step` holds."""
        from ragen_jax.models.hf_files import CheckpointError

        try:
            stored = self.manager.item_metadata(step)["state"]
            if stored is None:
                raise FileNotFoundError(f"no model state in {os.path.join(self.directory, str(step))}")
            return stored
        except Exception as e:  # noqa: BLE001 - any failure to read it means the same to the user
            raise CheckpointError(unreadable_checkpoint(self.directory, step, e)) from e

    def restore_meta(self, step: int) -> dict:
        """Only the JSON metadata of `step` (to learn what its state holds before restoring it)."""
        from ragen_jax.models.hf_files import CheckpointError

        try:
            return self.manager.restore(step, args=ocp.args.Composite(meta=ocp.args.JsonRestore()))["meta"]
        except Exception as e:  # noqa: BLE001
            raise CheckpointError(unreadable_checkpoint(self.directory, step, e)) from e

    def remove_partial_saves(self) -> list[str]:
        """Delete the temporary folders of saves cut short in an earlier process (killed while writing: Orbax never
        removes them, and each holds up to a whole checkpoint's space) -> their paths. Only for the process about
        to write here: another's save in progress is such a folder too (process 0 deletes)."""
        folders = sorted(glob.glob(os.path.join(self.directory, "*.orbax-checkpoint-tmp*")))
        if jax.process_index() == 0:
            for folder in folders:
                shutil.rmtree(folder, ignore_errors=True)
        return folders

    def _remove_partial(self, step: int) -> None:
        """Delete what a failed save of `step` left (Orbax's temporary folder): on a full disk it holds space."""
        if jax.process_index() == 0:
            for folder in glob.glob(os.path.join(self.directory, f"{step}.orbax-checkpoint-tmp*")):
                shutil.rmtree(folder, ignore_errors=True)

    def close(self) -> None:
        """Close the Orbax manager; a later call creates a fresh one (so closing twice, or saving after, works)."""
        if self._manager is not None:
            self._manager.close()
            self._manager = None
