"""A whole run on a Trainer: warm start, RL steps with validations, checkpoints and early stops, the final
validation, the summary and the Hugging Face export."""

from __future__ import annotations

import json
import logging
import os
import time
from typing import Any

from tqdm import tqdm

from ragen_jax.checkpoint import CheckpointWriteError, earlier_run_error
from ragen_jax.config.files import resumed_config_warning, write_config_json
from ragen_jax.errors import RunFolderError
from ragen_jax.monitoring import flatten_config
from ragen_jax.trainer import report
from ragen_jax.trainer.async_run import AsyncSchedule
from ragen_jax.trainer.early_stop import StepSignals, early_stop_reason
from ragen_jax.trainer.interrupt import StopRequests, stop_message

logger = logging.getLogger(__name__)


def record_config(trainer) -> None:
    """The resolved config to the workdir's config.json (process 0) and to TensorBoard (hparams and text)."""
    run = trainer.run
    if trainer.is_main:
        if trainer.state.start_step and (warning := resumed_config_warning(trainer.workdir, run)):
            logger.warning(warning)
        write_config_json(trainer.workdir, run, report.custom_functions(run))
    trainer.monitor.config(flatten_config(run.raw))


def warm_start(trainer) -> None:
    """The warm start before RL: validated before and after; the KL reference and the critic then start from the
    warm-started policy."""
    from ragen_jax.warmstart import run_warmstart

    result = run_warmstart(trainer.models, trainer.run, trainer.rollout, trainer.train_env, trainer.monitor,
                           validate=lambda: trainer.run_validation(0), success_key=f"val/{trainer.val_tags[0]}/success",
                           mesh=trainer.mesh, show_progress=trainer.is_main)
    trainer.dump_rollouts("val", 0, result.after_episodes, name="val_after_warmstart.jsonl")
    trainer.models.reset_reference()
    trainer.models.rebuild_critic_from_policy()
    trainer.state.warmstart = result.metrics
    for phase, key in (("before_warmstart", "val_success_before_warmstart"),
                       ("after_warmstart", "val_success_after_warmstart")):
        trainer.state.history.append({"step": 0, "val_success": result.metrics[key], "phase": phase})
    trainer.monitor.scalars({f"val/{k[len('val_after_warmstart/'):]}": v for k, v in result.metrics.items()
                             if k.startswith("val_after_warmstart/")}, 0)


def resumed_stop(trainer) -> str | None:
    """Why the restored run stopped early after its checkpoint's step (judged under this config's stops), so
    the resume trains no further step, as the run did not; None for a fresh run or one that goes on."""
    state, run = trainer.state, trainer.run
    if state.start_step == 0:
        return None
    reason = early_stop_reason(state, StepSignals.of(state.last_stop_metrics), run.trainer.early_stop,
                               run.filter.empty_stop_steps)
    if reason:
        logger.warning("The run in %s stopped early after step %d (%s): this resume trains no further step. To "
                       "train on from it, turn that stop off or loosen it (trainer.early_stop.*, "
                       "filter.empty_stop_steps).", trainer.workdir, state.start_step, reason)
    return reason


def train(trainer) -> dict[str, Any]:
    """Warm start (if configured), then RL steps with validation, logging and checkpoints -> summary."""
    run, state, t = trainer.run, trainer.state, trainer.run.trainer
    if state.start_step == 0 and (error := earlier_run_error(trainer.checkpointer.directory)):
        raise RunFolderError(error)  # before any work: a fresh run never mixes with an earlier one
    if (partial := trainer.checkpointer.remove_partial_saves()) and trainer.is_main:
        logger.warning("Removed %d partial checkpoint folder(s) of a save cut short by an earlier process: %s",
                       len(partial), ", ".join(partial))
    wall0 = time.perf_counter()
    record_config(trainer)
    if run.warmstart.enabled and state.start_step == 0:
        warm_start(trainer)
    elif run.val.every and run.val.at_start and state.start_step == 0:
        vm = trainer.validate(0)
        trainer.record_validation(0, vm, streak=False)
        trainer.monitor.scalars(vm, 0)
    stopped = resumed_stop(trainer)
    if state.start_step >= t.total_steps > 0 and not stopped:
        logger.warning("The run in %s already trained its %d steps (trainer.total_steps): nothing is left to "
                       "train; the summary, the final validation and the export are written again. To train on, "
                       "raise --config.trainer.total_steps.", trainer.workdir, t.total_steps)
    bar = tqdm(range(state.start_step, state.start_step if stopped else t.total_steps), desc="train",
               disable=not trainer.is_main, initial=state.start_step, total=t.total_steps, dynamic_ncols=True)
    stops = StopRequests()
    failures = []  # outputs the run could not write: reported once the rest is written
    with stops:  # the final save too: a signal while it writes (the run's only checkpoint at save_every=0)
        last, stop_reason, saved, trained_tokens, rl_step_s = rl_steps(trainer, bar, stops)
        bar.close()
        if last >= state.start_step and saved != last and (error := trainer.checkpoint(last, final=True)):
            failures.append(f"The run's final state (after step {last + 1}) was not saved: {error} Then "
                            "continue from there with --config.trainer.resume=True and the same --workdir.")
    stop_reason = stop_reason or stopped
    signal_name = stops.agreed()  # also one that came after the last step: every process ends alike
    if signal_name:  # the user or the scheduler wants the process gone: no final validation or export
        if not failures:
            logger.warning("Stopped by %s after step %d; checkpoint %s/%d saved. Continue with "
                           "--config.trainer.resume=True and the same --workdir.", signal_name, last + 1,
                           trainer.checkpointer.directory, last)
    elif run.val.every and (not state.history or state.history[-1]["step"] != last + 1):
        vm = trainer.validate(last + 1)
        trainer.record_validation(last + 1, vm)
        trainer.monitor.scalars(vm, last + 1)
    summary = report.run_summary(trainer, time.perf_counter() - wall0, trained_tokens, stop_reason, rl_step_s)
    summary["stopped_by_signal"] = signal_name
    if last >= state.start_step and not failures:
        summary["outputs"].append(f"Checkpoint after {last + 1} RL steps: {trainer.checkpointer.directory}/{last}")
    if t.export_hf and not signal_name:
        folder = os.path.join(trainer.workdir, "hf_export")
        try:
            summary["outputs"].append(f"Hugging Face folder: {trainer.export(folder)}")
        except OSError as e:
            failures.append(f"The Hugging Face export to {folder} failed ({type(e).__name__}: {e}). Free space "
                            "there, then run the same command with --config.trainer.resume=True: it trains no "
                            "step again and writes the export.")
    summary["failures"] = failures
    trainer.monitor.flush()
    if trainer.is_main:
        try:
            with open(os.path.join(trainer.workdir, "summary.json"), "w") as f:
                json.dump(summary, f, indent=2)
        except OSError as e:
            failures.append(f"{trainer.workdir}/summary.json could not be written ({e}).")
    trainer.monitor.close()
    if failures:
        raise CheckpointWriteError(" ".join(failures))
    return summary


def rl_steps(trainer, bar, stops: StopRequests) -> tuple[int, str | None, int | None, float, float]:
    """The RL steps of `bar` until the end, an early stop or a stop request -> (last step run, stop reason,
    last step saved, tokens trained, the steps' summed `timing_s/step` seconds)."""
    state = trainer.state
    stop_reason, saved, step, trained_tokens, rl_step_s = None, None, state.start_step - 1, 0.0, 0.0
    schedule = None
    try:
        for step in bar:
            t0 = time.perf_counter()
            if trainer.asynchronous and schedule is None:
                schedule = AsyncSchedule(trainer, step)  # the worker starts with the first step's rollout
            if schedule is None:
                metrics = trainer.train_step(step)
            else:  # the rollout of this step was played while the learner trained the earlier ones
                collected, async_metrics = schedule.batch_for(step)
                metrics = {**trainer.learn(collected, step), **async_metrics}
                schedule.published(step)
            stop_reason, saved, trained_tokens, rl_step_s, done = _after_step(
                trainer, bar, stops, step, metrics, t0, saved, trained_tokens, rl_step_s)
            if done:
                break
    finally:
        if schedule is not None:
            schedule.close()
    return step, stop_reason, saved, trained_tokens, rl_step_s


def _after_step(trainer, bar, stops: StopRequests, step: int, metrics: dict, t0: float, saved, trained_tokens: float,
                rl_step_s: float):
    """Log, validate, checkpoint and judge a finished step -> (stop reason, last step saved, tokens trained, RL
    step seconds, whether the run stops here)."""
    run, state, t = trainer.run, trainer.state, trainer.run.trainer
    metrics.update(trainer.collapse.warnings(metrics))
    state.last_stop_metrics = StepSignals.of(metrics).to_meta()  # before the checkpoint, which keeps them
    trained_tokens += metrics.get("perf/trained_tokens", 0.0)
    metrics["timing_s/step"] = time.perf_counter() - t0
    rl_step_s += metrics["timing_s/step"]
    if run.val.every and (step + 1) % run.val.every == 0:
        vm = trainer.validate(step + 1)
        trainer.record_validation(step + 1, vm)
        metrics.update(vm)
    trainer.monitor.scalars(metrics, step + 1)
    bar.set_postfix({"succ": f"{metrics.get(f'train/{trainer.tag}/success', 0):.2f}",
                     "val": f"{state.history[-1]['val_success']:.2f}" if state.history else "-",
                     "kept": f"{metrics.get('rollout/filter_kept_ratio', 1):.2f}"})
    if t.save_every and (step + 1) % t.save_every == 0 and trainer.checkpoint(step) is None:
        saved = step
    stop_reason = trainer.stop_reason(metrics)
    if stop_reason:
        logger.warning("Early stop at step %d: %s.", step + 1, stop_reason)
        return stop_reason, saved, trained_tokens, rl_step_s, True
    if stops.agreed():
        return stop_message(stops.received), saved, trained_tokens, rl_step_s, True
    return None, saved, trained_tokens, rl_step_s, False


def warm_start_only(trainer, config_arg: str) -> tuple[dict[str, float], list[str]]:
    """`--mode=sft`: the warm start alone, saved as checkpoint 0 and a Hugging Face folder -> (its metrics, the
    lines that say where they are and the command that trains RL from them). config_arg: the --config value."""
    record_config(trainer)
    warm_start(trainer)
    trainer.save(0)
    folder = trainer.export(os.path.join(trainer.workdir, "hf_export"))
    preset = " --config.model.preset=''" if trainer.run.model.preset else ""
    lines = [f"Warm-started policy: checkpoint {trainer.checkpointer.directory}/0, Hugging Face folder {folder}",
             f"RL from it (with your other overrides): python run.py --config={config_arg}{preset} "
             f"--config.model.path={folder} --config.warmstart.enabled=False "
             f"--workdir={os.path.normpath(trainer.workdir)}_rl"]
    if trainer.is_main:
        lines.append("Validation rollouts after the warm start: "
                     f"{os.path.join(trainer.workdir, 'rollouts', 'val_after_warmstart.jsonl')}")
    metrics = {k: v for k, v in trainer.state.warmstart.items() if not k.startswith("val_after")}
    return metrics, lines
