"""`run.py --mode=eval`: validation rollouts of a trained policy, metrics, JSONL/PKL dumps.

What is evaluated: `--checkpoint=PATH` (an Orbax step folder `.../checkpoints/<N>`, a Hugging Face folder, or
a run folder, whose latest checkpoint is taken; `init` for the freshly initialised model), else the workdir's
latest checkpoint, else its `hf_export/`; a workdir with neither is an error (an untrained model scored by
mistake reads as a result). Outputs go to `<workdir>/eval/<what>/`, never over a
training run's files. Validation draws the sampling keys the training run's validation drew after the same RL
steps: a checkpoint's counters say how many, a training export's `ragen_jax_training.json` too (other folders: 0).
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os

from ragen_jax.errors import NothingToEvaluateError
from ragen_jax.models.hf_files import read_training_record
from ragen_jax.rollout.dump import dump_kwargs, write_jsonl, write_pkl
from ragen_jax.rollout.types import RolloutResult

logger = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class EvalTarget:
    """The weights to evaluate: kind "orbax" (checkpoints folder + step), "hf" (a folder) or "init"."""

    kind: str
    path: str
    step: int | None
    out_dir: str

    def describe(self, rl_steps: int | None = None) -> str:
        """What was evaluated; `rl_steps`: the RL steps the checkpoint had run (checkpoint N follows step N + 1)."""
        if self.kind == "orbax":
            after = "" if rl_steps is None else f", after {rl_steps} RL steps"
            return f"checkpoint step {self.step} ({self.path}/{self.step}{after})"
        if self.kind == "hf":
            after = "" if rl_steps is None else f", exported after {rl_steps} RL steps"
            return f"Hugging Face folder {self.path}{after}"
        return "the freshly initialised model (--checkpoint=init)"


def latest_step(checkpoints: str) -> int | None:
    """The newest finished Orbax step under a checkpoints folder (None when there is none)."""
    if not os.path.isdir(checkpoints):
        return None
    steps = [int(name) for name in os.listdir(checkpoints)
             if name.isdigit() and os.path.isdir(os.path.join(checkpoints, name))]
    return max(steps) if steps else None


def is_hf_folder(path: str) -> bool:
    return os.path.isfile(os.path.join(path, "config.json")) and any(
        os.path.isfile(os.path.join(path, f)) for f in ("model.safetensors", "model.safetensors.index.json"))


def eval_target(workdir: str, checkpoint: str | None = None) -> EvalTarget:
    """Which weights `--mode=eval` scores, and where its outputs go (see the module docstring)."""
    out = os.path.join(os.path.abspath(workdir), "eval")
    if checkpoint == "init":
        return EvalTarget("init", "", None, os.path.join(out, "init"))
    if checkpoint:
        path = os.path.abspath(checkpoint)
        if is_hf_folder(path):
            return EvalTarget("hf", path, None, os.path.join(out, os.path.basename(path)))
        if os.path.basename(path).isdigit() and os.path.isdir(path):
            step = int(os.path.basename(path))
            return EvalTarget("orbax", os.path.dirname(path), step, os.path.join(out, f"step_{step}"))
        step = latest_step(os.path.join(path, "checkpoints"))
        if step is not None:
            return EvalTarget("orbax", os.path.join(path, "checkpoints"), step, os.path.join(out, f"step_{step}"))
        if is_hf_folder(os.path.join(path, "hf_export")):
            return EvalTarget("hf", os.path.join(path, "hf_export"), None, os.path.join(out, "hf_export"))
        raise NothingToEvaluateError(
            f"--checkpoint={checkpoint}: not an Orbax step folder (.../checkpoints/<step>), a Hugging Face folder "
            "(config.json + model.safetensors) or a run folder with checkpoints/ or hf_export/.")
    workdir = os.path.abspath(workdir)
    step = latest_step(os.path.join(workdir, "checkpoints"))
    if step is not None:
        return EvalTarget("orbax", os.path.join(workdir, "checkpoints"), step, os.path.join(out, f"step_{step}"))
    if is_hf_folder(os.path.join(workdir, "hf_export")):
        return EvalTarget("hf", os.path.join(workdir, "hf_export"), None, os.path.join(out, "hf_export"))
    raise NothingToEvaluateError(
        f"Nothing to evaluate in --workdir={workdir}: it has no checkpoints/ and no hf_export/. Point --workdir at a "
        "training run, pass --checkpoint=PATH (a run, an Orbax step folder or a Hugging Face folder), or "
        "--checkpoint=init to score the freshly initialised model.")


def run_folder_of(target: EvalTarget, workdir: str) -> str:
    """The run folder whose config.json describes what is evaluated: the workdir when it holds one, else the run
    an Orbax target's checkpoints folder belongs to, else the workdir."""
    if os.path.isfile(os.path.join(workdir, "config.json")) or target.kind != "orbax":
        return workdir
    return os.path.dirname(os.path.abspath(target.path))


def run_eval(trainer, target: EvalTarget | None = None) -> dict[str, float]:
    """Play the validation episodes of `target`'s weights with the trainer's public API; write config, metrics
    and rollouts to the target's folder -> the metrics."""
    from ragen_jax.config.files import write_config_json
    from ragen_jax.trainer.report import custom_functions

    target = target or EvalTarget("init", "", None, os.path.join(trainer.workdir, "eval", "init"))
    rl_steps = None
    if target.kind == "orbax":
        trainer.restore(target.path, target.step)
        rl_steps = int(trainer.state.steps_run)  # the step the training run's TensorBoard shows
    elif target.kind == "hf":
        rl_steps = read_training_record(target.path).get("rl_steps")  # None: not a ragen_jax run's export
        rl_steps = rl_steps if isinstance(rl_steps, int) and rl_steps >= 0 else None
    # the sampling keys of the training's validation after the same number of RL steps: the same number it logged
    metrics, episodes = trainer.run_validation(step=rl_steps or 0)
    metrics["eval/num_episodes"] = float(len(episodes))
    if trainer.is_main:
        os.makedirs(target.out_dir, exist_ok=True)
        write_config_json(target.out_dir, trainer.run, custom_functions(trainer.run))
        jsonl = write_jsonl(os.path.join(target.out_dir, "rollouts.jsonl"), episodes, **dump_kwargs(trainer.rollout))
        write_pkl(os.path.join(target.out_dir, "rollouts.pkl"),
                  RolloutResult(episodes=episodes, batch=None, metrics=metrics, timing={}))
        with open(os.path.join(target.out_dir, "metrics.json"), "w") as f:
            json.dump({"evaluated": target.describe(rl_steps), **metrics}, f, indent=2)
        trainer.monitor.scalars(metrics, rl_steps or 0)
        trainer.monitor.flush()
        print(f"Evaluated {target.describe(rl_steps)} on {len(episodes)} episodes.\nRollouts: {jsonl} "
              f"(and rollouts.pkl); metrics: {os.path.join(target.out_dir, 'metrics.json')}")
    return metrics
