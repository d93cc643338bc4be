"""The StarPO trainer: a run's parts (config, models, engines, envs, monitor, checkpoints, state) and its step.

    trainer = Trainer(cfg, workdir)          # checks the config, builds envs and models
    with trainer.activate_mesh():
        metrics = trainer.train_step(0)      # one RL step: collect -> select -> score -> advantages -> update
    summary = trainer.train()                # warm start, RL steps, validations, checkpoints, export

Randomness derives from (seed, step) and rollout seeds from the step, so a run resumed from a checkpoint continues
exactly as the uninterrupted run would have.
"""

from __future__ import annotations

import collections
import logging
import os
import time
from typing import Any

import jax
import jax.numpy as jnp

from ragen_jax import sharding
from ragen_jax.checkpoint import Checkpointer, CheckpointWriteError
from ragen_jax.algos.settings import AlgoSettings
from ragen_jax.config import RunConfig
from ragen_jax.config.checks import truncated_sampling_warning, validation_envs
from ragen_jax.config.sections import env_tag
from ragen_jax.errors import RagenError, RunFolderError
from ragen_jax.monitoring import Monitor, wandb_settings
from ragen_jax.rollout import RolloutConfig, make_engine
from ragen_jax.rollout.dump import dump_kwargs, trajectory_sample_text, write_jsonl
from ragen_jax.sampling.vision import vl_config_of
from ragen_jax.trainer import setup as setup_lib
from ragen_jax.trainer import stages
from ragen_jax.trainer.collapse_monitor import CollapseMonitor
from ragen_jax.trainer.early_stop import StepSignals, after_selection, early_stop_reason
from ragen_jax.trainer.gradient_split import split_due, split_training_batch
from ragen_jax.trainer.models import RLModels
from ragen_jax.trainer.state import RunState
from ragen_jax.trainer.steps import make_step_fns
from ragen_jax.trainer.validation import report_env_errors, run_validation

logger = logging.getLogger(__name__)


def join_processes(run: RunConfig) -> None:
    """jax.distributed.initialize for a multi-host config, with the fix when JAX already started alone."""
    try:
        sharding.maybe_initialize_distributed(run)
    except RuntimeError as e:
        raise RuntimeError(
            f"{e}\nMulti-host runs must join the other processes first: call "
            "ragen_jax.sharding.maybe_initialize_distributed(cfg) before importing envs or the trainer "
            "(gymnax starts JAX on import); run.py does this for you.") from e


def warm_start_only_error(directory: str, workdir: str, step: int) -> str:
    """Why a resume of `--mode=sft`'s checkpoint is refused (it would count the warm start as RL step `step` + 1),
    and how to train RL from that warm start."""
    return (f"{directory}/{step} is the warm start of `--mode=sft`, not an RL step: resuming it would skip RL step "
            f"{step + 1} and every validation before it. Train RL from the warm-started policy in another workdir: "
            f"--config.model.path={os.path.join(workdir, 'hf_export')} --config.warmstart.enabled=False "
            "(and --config.model.preset='' with a :tiny config) --workdir=OTHER.")


class Trainer:
    """One run: builds its parts from a config (an ml_collections config or a RunConfig, checked here) and runs
    the training step as a list of stages (`ragen_jax.trainer.stages`)."""

    def __init__(self, cfg: Any, workdir: str | None = None, *, log_dir: str | None = None, mode: str = "train"):
        """log_dir: where TensorBoard events go (default workdir/tb; an evaluation writes beside its outputs)."""
        self.run = run = RunConfig.from_config(cfg, mode)
        join_processes(run)
        self.workdir = os.path.abspath(workdir or run.workdir)
        self.is_main = jax.process_index() == 0
        t = run.trainer
        self.tag = run.env.tag or env_tag(run.env.name)
        self.batch_size = run.env.batch_size
        self.asynchronous = t.schedule == "async"
        self.mesh, self.rollout_mesh = self._meshes()
        sharding.check_batch_sizes({"env.groups x env.group_size": self.batch_size,
                                    "trainer.mini_batch_size": t.mini_batch_size,
                                    "trainer.micro_batch_size": t.micro_batch_size}, self.mesh.shape)
        # envs first: a missing service (e.g. a Lean server) fails before minutes of model loading
        self.val_names = validation_envs(run.val.name, run.env.name)
        self.val_tags = [env_tag(name) for name in self.val_names]  # the run's history follows the first
        self.val_batch = sharding.validation_batch_size(run.val, self.mesh.shape)
        val_rows = min(run.val.batch_size, run.val.groups * run.val.group_size)
        if self.val_batch != val_rows and self.is_main:  # the extra groups are played, not counted
            logger.info("Validation plays %d episodes at a time, not %d: a multiple of val.group_size and of the %d "
                        "data*fsdp devices; the extra episodes are not counted.", self.val_batch, val_rows,
                        sharding.batch_shards(self.mesh))
        own = self.rollout_rows() if self.asynchronous else None  # an async run's worker plays its host's share
        self.train_env = setup_lib.env_batch(run.env, run.env.name, own.stop - own.start if own else
                                             self._local_rows(self.batch_size))
        self.val_envs = [setup_lib.env_batch(run.env, name, self._local_rows(self.val_batch), run.val.env_kwargs)
                         for name in self.val_names]
        self.models = RLModels.build(run, self.mesh)
        self.tokenizer = self.models.tokenizer
        self.rollout = RolloutConfig.of(run)
        r = run.rollout
        # each process plays the episodes of the rows its devices hold, with its own envs; an asynchronous run's
        # rollout worker plays on its own devices, with the continuous engine
        kind = "continuous" if self.asynchronous else r.engine
        self.engine = make_engine(kind, self.models.actor.graphdef, self.tokenizer, self.rollout,
                                  own.stop - own.start if own else self.batch_size, slots=r.slots, chunk=r.chunk,
                                  lanes=r.lanes, mesh=self.rollout_mesh)
        # one engine when the batches agree: its compiled programs serve both (the temperature is their argument);
        # an asynchronous run validates on the learner's thread while the worker plays, so with an engine of its own
        self.val_engine = self.engine if self.val_batch == self.batch_size and not self.asynchronous else make_engine(
            r.engine, self.models.actor.graphdef, self.tokenizer, self.rollout, self.val_batch, slots=r.slots,
            chunk=r.chunk, lanes=r.lanes, mesh=self.mesh)
        if warning := truncated_sampling_warning(run):
            logger.warning(warning)
        critic = self.models.critic
        self.algo = AlgoSettings.of(run)
        self.fns = make_step_fns(self.models.actor.graphdef, critic.graphdef if critic else None,
                                 self.algo, self.models.actor_optim.tx,
                                 self.models.critic_optim.tx if critic else None, t.micro_batch_size)
        self.base_key = jax.random.PRNGKey(t.seed)
        self.log_dir = log_dir or os.path.join(self.workdir, "tb")
        self.monitor = Monitor(self.log_dir, enabled=self.is_main, wandb=wandb_settings(vars(run.logging),
                                                                                        self.workdir))
        self.checkpointer = Checkpointer(os.path.join(self.workdir, "checkpoints"), max_to_keep=t.keep_checkpoints,
                                         barrier_timeout_s=t.checkpoint_barrier_timeout_s)
        self.collapse = CollapseMonitor(run, self.tokenizer, self.monitor)
        self.state = RunState(kl_in_reward_coef=float(run.algo.kl_ctrl_coef))
        self.env_errors: collections.Counter = collections.Counter()  # the training episodes' env errors, by text
        if t.resume:
            self._restore_latest()
        if self.state.start_step:  # the checkpoint's step logged everything at start_step: what follows is stale
            self.monitor.resumed_at(self.state.start_step + 1)
        elif log_dir is None and self.monitor.earlier_events and self.checkpointer.latest_step() is None:
            self.monitor.resumed_at(0)  # a run here that never saved (stopped early): its curves are not this one's

    def _meshes(self):
        """(the learner's mesh, the rollout's): one mesh over every device, except for an asynchronous run with
        mesh.rollout_devices = N, whose rollout worker samples on each host's first N devices and learns on the
        rest (so weight transfers stay on the host)."""
        n = self.run.mesh.rollout_devices
        if not self.asynchronous or n == 0:
            if self.asynchronous and jax.process_count() > 1:
                raise RagenError("An asynchronous run across hosts samples on each host's own devices: set "
                                 "mesh.rollout_devices to how many of each host's devices sample (at least 1).")
            mesh = sharding.make_mesh(self.run.mesh)
            return mesh, mesh
        hosts: dict[int, list] = {}
        for device in jax.devices():
            hosts.setdefault(device.process_index, []).append(device)
        own = sorted(hosts[jax.process_index()], key=lambda d: d.id)
        if n >= len(own):
            raise RagenError(f"mesh.rollout_devices={n} leaves no device to learn on: this host has {len(own)}. "
                             f"Give the rollout fewer, or 0 to share every device between both roles.")
        learners = [d for p in sorted(hosts) for d in sorted(hosts[p], key=lambda d: d.id)[n:]]
        return sharding.make_mesh(self.run.mesh, devices=learners), sharding.make_mesh({"data": -1},
                                                                                        devices=own[:n])

    def rollout_placement(self, params: Any) -> Any:
        """The learner's params as a copy on the rollout's devices (asynchronous training's weight transfer)."""
        if self.rollout_mesh is self.mesh:
            return jax.tree.map(jnp.copy, params)
        if jax.process_count() > 1:  # the learners' shards live on every host: gather, then place on this one's
            params = sharding.gather_to_host(params)
        return sharding.reshard_for_sampling(jax.tree.map(jnp.copy, params), self.rollout_mesh,
                                             layout=self.run.mesh.sampling_layout)

    def _local_rows(self, batch_size: int) -> int:
        """How many of a batch's episodes this process plays (the rows its devices hold)."""
        rows = sharding.process_rows(self.mesh, batch_size)
        return rows.stop - rows.start

    def close(self) -> None:
        """Release what the trainer holds outside this process: its env batches' resources (a remote env
        server's sessions, which otherwise wait out the server's TTL; subprocesses) and the checkpoint manager.
        Idempotent; call it when done with the trainer (run.py does)."""
        for batch in {id(b): b for b in (self.train_env, *self.val_envs)}.values():
            batch.close()
        self.checkpointer.close()
        self.monitor.close()

    def activate_mesh(self):
        """Context making the trainer's mesh the active one, so the models' activation sharding hints apply."""
        return jax.set_mesh(self.mesh)

    # ------------------------------------------------------------------ one RL step
    def train_step(self, step: int) -> dict[str, float]:
        """RL step `step` (0-based) as its stages; -> the step's metrics (TensorBoard shows it as step + 1)."""
        return self.learn(self.collect(step), step)

    def collect(self, step: int, weights=None) -> stages.Collected:
        """The rollout of RL step `step` (its seeds and sampling keys) with the current policy, or with the newest
        weights of `weights` (a WeightSource: asynchronous training's rollout worker)."""
        params = self.models.sampling_params() if weights is None else None
        rows = self.rollout_rows() if self.asynchronous else None
        return stages.collect(self.engine, params, self.train_env, self.run.env, step,
                              jax.random.fold_in(self.base_key, step), tag=self.tag,
                              row_multiple=self.run.trainer.mini_batch_size, weights=weights, rows=rows)

    def rollout_rows(self) -> slice:
        """The episodes of a step this host's rollout worker plays (asynchronous runs: every host plays its own
        share on its own devices, and the learners gather them)."""
        share = self.batch_size // jax.process_count()
        return slice(jax.process_index() * share, (jax.process_index() + 1) * share)

    def learn(self, collected: stages.Collected, step: int) -> dict[str, float]:
        """The stages after the rollout, for RL step `step`: select, score, advantages, update, report."""
        run, models, micro = self.run, self.models, self.run.trainer.micro_batch_size
        observed = self._observe(collected, step + 1)
        selection = stages.select(collected.result, run.env.group_size, run.filter, self._score_entropy)
        counted, skip = after_selection(self.state, selection, run.trainer.early_stop, run.filter.empty_stop_steps)
        if skip:
            return stages.step_report(collected.metrics, observed, selection.metrics, counted,
                                      stages.skipped_update(skip), timing=collected.timing)
        batch = stages.training_batch(collected.result.batch, selection.rows, run.trainer.mini_batch_size, self.mesh,
                                      vl_config_of(models.actor.graphdef))
        scored = stages.score(models, self.fns, batch, run.algo, micro, self.state.kl_in_reward_coef)
        self.state.kl_in_reward_coef = scored.next_kl_coef
        batch, data_metrics, scoring_s = stages.advantages(self.fns, scored, selection.filter.kept_ratio,
                                                           run.filter.loss_scaling, run.algo.use_kl_in_reward,
                                                           models.critic is not None)
        timing = {**collected.timing, "timing_s/score_and_adv": scoring_s}
        data_metrics.update(self._gradient_analysis(batch, collected.episodes, step, timing))
        updated = stages.update(models, self.fns, batch, step, run.trainer, models.learning_rates(
            self.state.actor_update_steps, self.state.critic_update_steps))
        self._count_updates(updated, step)
        return stages.step_report(collected.metrics, observed, selection.metrics, counted, data_metrics,
                                  updated.metrics, timing={**timing, "timing_s/update": updated.seconds,
                                                           "perf/trained_tokens": batch.trained_tokens})

    def _gradient_analysis(self, batch: stages.TrainingBatch, episodes: list, step: int, timing: dict) -> dict:
        """RAGEN-2's gradient analysis when due (diagnostics.gradient_every), on the batch the update starts from
        (an actor that trains this step only, as RAGEN) -> its metrics; its seconds go to `timing`."""
        run = self.run
        if step < run.trainer.critic_warmup or not split_due(step + 1, run.diagnostics.gradient_every):
            return {}
        t0 = time.perf_counter()
        metrics = split_training_batch(self.models, batch, episodes, self.algo,
                                       mini_batch_size=run.trainer.mini_batch_size,
                                       micro_batch_size=run.trainer.micro_batch_size,
                                       num_buckets=run.diagnostics.gradient_buckets,
                                       bucket_mode=run.diagnostics.gradient_bucket_mode)
        timing["timing_s/gradient_analysis"] = time.perf_counter() - t0
        return metrics

    def _observe(self, collected: stages.Collected, shown: int) -> dict[str, float]:
        """What a step's rollout shows before it trains: dumps and a sample trajectory when due, env failures on
        the console, and the MI diagnostics -> their metrics. shown: the step as TensorBoard shows it."""
        t = self.run.trainer
        if t.dump_rollouts_every and shown % t.dump_rollouts_every == 0:
            self.dump_rollouts("train", shown, collected.episodes)
        if t.log_samples_every and shown % t.log_samples_every == 0:
            self.monitor.text("samples/trajectory", trajectory_sample_text(collected.episodes,
                                                                           **dump_kwargs(self.rollout)), shown)
        if not collected.ok.all():
            self.env_errors.update(ep.error for ep in collected.episodes if ep.error)
            if self.is_main:
                report_env_errors(collected.episodes, f"Step {shown}", "left out of the update")
        return self.collapse.mi_metrics(shown, collected.episodes, self.models.actor.graphdef,
                                        self.models.actor.full())

    def _score_entropy(self, arrays: dict) -> Any:
        """Token entropies [rows, T] of host arrays under the current policy, on the host (an entropy filter's)."""
        dev = sharding.shard_batch(arrays, self.mesh)
        ent = stages.score_rows(self.fns["score_policy"], self.models.actor.trainable, self.models.actor.frozen, dev,
                                self.run.trainer.micro_batch_size, with_positions=True, output=1)
        return sharding.gather_to_host(ent)

    def _count_updates(self, updated: stages.Updated, step: int) -> None:
        """Count applied and skipped updates into the state; a skipped one (non-finite loss, gradient or new
        weights) is reported on the console."""
        for model, metrics in updated.updates:
            skipped = float(metrics["update_skipped"]) > 0
            self.state.count_update(skipped)
            if skipped:
                logger.warning("Step %d: %s update skipped (non-finite loss %.4g, gradient norm %.4g, or new "
                               "weights); parameters and optimizer state kept.", step + 1, model,
                               float(metrics.get("loss", metrics.get("vf_loss", float("nan")))),
                               float(metrics["grad_norm"]))
        self.state.critic_update_steps += updated.critic_trained
        self.state.actor_update_steps += updated.actor_trained

    def stop_reason(self, metrics: dict[str, float] | None = None) -> str | None:
        """Why the run stops after a step whose metrics are `metrics` (early_stop.early_stop_reason on the run's
        state), or None."""
        return early_stop_reason(self.state, StepSignals.of(metrics or {}), self.run.trainer.early_stop,
                                 self.run.filter.empty_stop_steps)

    # ------------------------------------------------------------------ validation and dumps
    def run_validation(self, step: int) -> tuple[dict[str, float], list]:
        """The validation episodes with the current policy -> (metrics, episodes), drawn with the keys of the
        validation after RL step `step` (0: before any)."""
        return run_validation(self.val_engine, self.models.sampling_params(), self.val_envs, self.val_tags,
                              self.run.val, self.val_batch, self.base_key, step, self.rollout.context_mode,
                              show_progress=self.is_main)

    def validate(self, step: int) -> dict[str, float]:
        """Validation at TensorBoard step `step` (0: before any RL step; n: after n steps), its env failures
        reported and its rollouts dumped when the config asks."""
        metrics, episodes = self.run_validation(step)
        if self.is_main:
            report_env_errors(episodes, f"Validation at step {step}", "left out of its metrics")
        if self.run.trainer.dump_rollouts_every:
            self.dump_rollouts("val", step, episodes)
        return metrics

    def record_validation(self, step: int, metrics: dict[str, float], streak: bool = True,
                          phase: str | None = None) -> None:
        """A validation into the run's history and low-success streaks (RunState.record_validation)."""
        self.state.record_validation(step, metrics, self.val_tags, self.run.trainer.early_stop.val_success_below,
                                     streak=streak, phase=phase)

    def dump_rollouts(self, split: str, step: int, episodes: list, name: str | None = None) -> str | None:
        """rollouts/{split}_step{step}.jsonl (or rollouts/{name}), numbered by the TensorBoard and console step
        (1 = the first RL step); process 0 writes -> the path (None on the other processes)."""
        if not self.is_main:
            return None
        path = os.path.join(self.workdir, "rollouts", name or f"{split}_step{step}.jsonl")
        return write_jsonl(path, episodes, **dump_kwargs(self.rollout))

    # ------------------------------------------------------------------ checkpoints
    def save(self, step: int) -> None:
        """Checkpoint `step`: models, optimizers, the KL reference when it is not the initial policy, the state."""
        with_reference = self.models.saves_reference
        meta = {**self.state.to_meta(step), "collapse": self.collapse.state(),
                "reference": "saved" if with_reference else "initial"}
        self.monitor.flush()  # the step's scalars reach disk before the checkpoint that makes it final
        self.checkpointer.save(step, self.models.state(with_reference), meta)

    def checkpoint(self, step: int, final: bool = False) -> str | None:
        """Save `step`; a checkpoint that cannot be written (a full disk) is counted and, unless it is the run's
        `final` one (the caller reports that), logged while the run goes on -> None, or why it was not written."""
        try:
            self.save(step)
            return None
        except CheckpointWriteError as e:
            self.state.checkpoint_save_failures += 1
            if not final:
                logger.error("%s The run goes on; the next checkpoint tries again.", e)
            self.monitor.scalars({"checkpoint/save_failures": self.state.checkpoint_save_failures}, step + 1)
            return str(e)

    def _restore_latest(self) -> None:
        step = self.checkpointer.latest_step()
        if step is None:
            logger.info("No checkpoint in %s; starting fresh.", self.checkpointer.directory)
            return
        if self.checkpointer.restore_meta(step).get("counters", {}).get("steps_run", 1) == 0:
            raise RunFolderError(warm_start_only_error(self.checkpointer.directory, self.workdir, step))
        self.restore(self.checkpointer.directory, step)

    def restore(self, directory: str, step: int) -> None:
        """Load checkpoint `step` of the checkpoints folder `directory` (this run's or another run's)."""
        checkpointer = (self.checkpointer if os.path.abspath(directory) == self.checkpointer.directory
                        else Checkpointer(directory, max_to_keep=None,
                                          barrier_timeout_s=self.run.trainer.checkpoint_barrier_timeout_s))
        with_reference = checkpointer.restore_meta(step).get("reference") == "saved"
        if with_reference and not self.models.need_ref:
            logger.warning("Checkpoint %d holds a KL reference this config does not use; ignoring it.", step)
        meta = self.models.restore(checkpointer, step, with_reference and self.models.need_ref)
        self.state.load_meta(meta, self.run.trainer.critic_warmup)
        self.collapse.load_state(meta.get("collapse", {}))
        logger.info("Restored step %d from %s.", step, directory)

    def export(self, folder: str) -> str:
        """Write the policy as a Hugging Face folder (LoRA merged), recording the RL steps it trained."""
        return self.models.export(folder, self.state.steps_run)

    # ------------------------------------------------------------------ the whole run
    def train(self) -> dict[str, Any]:
        """Warm start (if configured), then RL steps with validation, logging and checkpoints -> summary."""
        from ragen_jax.trainer.run_loop import train

        with self.activate_mesh():
            return train(self)
