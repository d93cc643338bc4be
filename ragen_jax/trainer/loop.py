"""The StarPO training loop: rollout -> filter -> score -> advantages -> update -> log.

Randomness is derived from (seed, step), and rollout seeds from the step, so a run resumed from a
checkpoint continues exactly as the uninterrupted run would have.
"""

from __future__ import annotations

import json
import logging
import os
import time
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx
from tqdm import tqdm

from ragen_jax.algos.kl import apply_kl_penalty, init_kl_controller, update_kl_controller
from ragen_jax import sharding
from ragen_jax.checkpoint import Checkpointer, CheckpointWriteError, earlier_run_error, leaf_dtypes, leaf_shapes
from ragen_jax.filtering import (FilterConfig, advantage_scale, compact, episode_values, filter_rollouts,
                                  metric_quantity, update_empty_streak)
from ragen_jax.monitoring import Monitor, flatten_config, wandb_settings
from ragen_jax.rollout import group_seeds
from ragen_jax.rollout import make_engine
from ragen_jax.rollout.dump import write_jsonl
from ragen_jax.rollout.metrics import episode_metrics, response_length, response_length_per_turn
from ragen_jax.trainer import report
from ragen_jax.trainer import setup as setup_lib
from ragen_jax.trainer.collapse_monitor import CollapseMonitor
from ragen_jax.trainer.early_stop import (early_stop_reason, resumed_stop_reason, reward_collapse, stop_metrics,
                                          zero_std_streak)
from ragen_jax.trainer.interrupt import StopRequests, stop_message
from ragen_jax.trainer.optim import MasterWeights, make_optimizer, with_rebuilt_master, without_masters
from ragen_jax.trainer.settings import (algo_settings, env_tag, resumed_config_warning, rollout_config,
                                        truncated_sampling_warning, validation_envs, validation_sampling,
                                        write_config_json)
from ragen_jax.trainer.steps import (batch_entropy, explained_variance, in_row_context, make_step_fns,
                                     mean_update_metrics, row_total_stats, sampler_agreement, scored_positions,
                                     take_rows, token_stats)

logger = logging.getLogger(__name__)

BATCH_KEYS = ("tokens", "attention_mask", "loss_mask", "sample_logprobs", "token_rewards", "group_ids",
              "episode_ids", "same_context")


def _join_processes(cfg) -> None:
    """jax.distributed.initialize for a multi-host config, with the fix when JAX already started alone."""
    try:
        sharding.maybe_initialize_distributed(cfg)
    except RuntimeError as e:
        raise RuntimeError(
            f"{e}\nMulti-host runs must join the other processes first: call "
            "ragen_jax.sharding.maybe_initialize_distributed(cfg) before importing envs or the trainer "
            "(gymnax starts JAX on import); run.py does this for you.") from e


def _local_rows(mesh, batch_size: int) -> int:
    """How many of a batch's episodes this process plays (the rows its devices hold)."""
    rows = sharding.process_rows(mesh, batch_size)
    return rows.stop - rows.start


def warm_start_only_error(directory: str, workdir: str, step: int) -> str:
    """Why a resume of `--mode=sft`'s checkpoint is refused (it would count the warm start as RL step `step` + 1),
    and how to train RL from that warm start."""
    return (f"{directory}/{step} is the warm start of `--mode=sft`, not an RL step: resuming it would skip RL step "
            f"{step + 1} and every validation before it. Train RL from the warm-started policy in another workdir: "
            f"--config.model.path={os.path.join(workdir, 'hf_export')} --config.warmstart.enabled=False "
            "(and --config.model.preset='' with a :tiny config) --workdir=OTHER.")


class Trainer:
    """Owns the models, optimizers, engines and env batches of one run."""

    def __init__(self, cfg, workdir: str | None = None, *, log_dir: str | None = None):
        """log_dir: where TensorBoard events go (default workdir/tb; an evaluation writes beside its outputs)."""
        _join_processes(cfg)
        self.cfg = cfg
        self.workdir = os.path.abspath(workdir or cfg.workdir)
        self.is_main = jax.process_index() == 0
        t = cfg.trainer
        self.tag = cfg.env.tag or env_tag(cfg.env.name)
        self.batch_size = cfg.env.groups * cfg.env.group_size
        if t.mini_batch_size % t.micro_batch_size:
            raise ValueError(f"trainer.mini_batch_size ({t.mini_batch_size}) must be a multiple of "
                             f"trainer.micro_batch_size ({t.micro_batch_size}).")
        self.mesh = sharding.make_mesh(cfg.mesh)
        sharding.check_batch_sizes({"env.groups x env.group_size": self.batch_size,
                                    "trainer.mini_batch_size": t.mini_batch_size,
                                    "trainer.micro_batch_size": t.micro_batch_size}, self.mesh.shape)
        # envs first: a missing service (e.g. a Lean server) fails before minutes of model loading
        self.val_names = validation_envs(cfg.val.name, cfg.env.name)
        self.val_tags = [env_tag(name) for name in self.val_names]
        self.val_name, self.val_tag = self.val_names[0], self.val_tags[0]  # the one the run's history follows
        val_rows = min(cfg.val.batch_size, cfg.val.groups * cfg.val.group_size)
        self.val_batch = sharding.validation_batch_size(cfg.val, self.mesh.shape)
        if self.val_batch != val_rows and self.is_main:  # the extra groups are played, not counted
            logger.info("Validation plays %d episodes at a time, not %d: a multiple of val.group_size and of the %d "
                        "data*fsdp devices; the extra episodes are not counted.", self.val_batch, val_rows,
                        sharding.batch_shards(self.mesh))
        self.train_env = setup_lib.env_batch(cfg.env, cfg.env.name, _local_rows(self.mesh, self.batch_size))
        self.val_envs = [setup_lib.env_batch(cfg.env, name, _local_rows(self.mesh, self.val_batch),
                                             cfg.val.env_kwargs) for name in self.val_names]
        self.val_env = self.val_envs[0]
        policy, self.tokenizer = setup_lib.load_policy_and_tokenizer(cfg.model)
        self.lora = cfg.model.lora.rank > 0
        self.use_critic = bool(cfg.algo.use_critic)
        self.need_ref = bool(cfg.algo.use_kl_loss or cfg.algo.use_kl_in_reward)
        critic = setup_lib.make_critic(cfg.model, policy) if self.use_critic else None
        device_bytes = sharding.device_memory_bytes()
        if device_bytes:
            sharding.check_plan(sharding.plan_from_config(cfg, policy.config, self.mesh.shape), device_bytes)
        self.actor = sharding.place_for_training(setup_lib.split_model(policy, self.lora), self.mesh)
        self.critic = (sharding.place_for_training(setup_lib.split_model(critic, self.lora, setup_lib.CRITIC_HEAD),
                                                   self.mesh) if critic is not None else None)
        self.ref_params = jax.tree.map(jnp.copy, self.actor.full()) if self.need_ref else None
        self.ref_is_initial = True  # the reference is the policy as built (rebuilt alike on resume)

        self.rollout_cfg = rollout_config(cfg)
        # each process plays the episodes of the rows its devices hold, with its own envs
        r = cfg.rollout
        self.engine = make_engine(r.engine, self.actor.graphdef, self.tokenizer, self.rollout_cfg, self.batch_size,
                                  slots=r.slots, chunk=r.chunk, lanes=r.lanes, mesh=self.mesh)
        # one engine when the batches agree: its compiled programs serve both (the temperature is their argument)
        self.val_engine = self.engine if self.val_batch == self.batch_size else make_engine(
            r.engine, self.actor.graphdef, self.tokenizer, self.rollout_cfg, self.val_batch, slots=r.slots,
            chunk=r.chunk, lanes=r.lanes, mesh=self.mesh)

        # schedules over RL steps, as veRL's (every mini-batch of a step at that step's rate)
        self.actor_tx, self.actor_lr = make_optimizer(cfg.optim.actor, t.total_steps, lr_outside=True)
        self.actor_opt = sharding.shard_state(self.actor_tx.init(self.actor.trainable), self.mesh)
        if self.critic is not None:
            self.critic_tx, self.critic_lr = make_optimizer(cfg.optim.critic, t.total_steps, lr_outside=True)
            self.critic_opt = sharding.shard_state(self.critic_tx.init(self.critic.trainable), self.mesh)
        else:
            self.critic_tx = self.critic_lr = self.critic_opt = None
        if warning := truncated_sampling_warning(cfg):
            logger.warning(warning)
        self.fns = make_step_fns(self.actor.graphdef, self.critic.graphdef if self.critic else None,
                                 algo_settings(cfg), self.actor_tx, self.critic_tx, t.micro_batch_size)
        self.filter_cfg = FilterConfig.from_mapping(dict(cfg.filter))
        self.base_key = jax.random.PRNGKey(t.seed)
        self.log_dir = log_dir or os.path.join(self.workdir, "tb")
        self.monitor = Monitor(self.log_dir, enabled=self.is_main, wandb=wandb_settings(cfg.logging, self.workdir))
        self.checkpointer = Checkpointer(os.path.join(self.workdir, "checkpoints"), max_to_keep=t.keep_checkpoints,
                                         barrier_timeout_s=t.checkpoint_barrier_timeout_s)
        self.collapse = CollapseMonitor(cfg, self.tokenizer, self.monitor)
        self.counters = {"empty_streak": 0, "val_low_streaks": {}, "std_zero_streak": 0, "skipped_in_a_row": 0,
                         "updates_applied": 0, "updates_skipped": 0, "steps_run": 0, "kept_ratio_sum": 0.0,
                         "actor_update_steps": 0, "critic_update_steps": 0,  # RL steps each model trained on
                         "checkpoint_save_failures": 0,
                         "kl_in_reward_coef": float(cfg.algo.kl_ctrl_coef),
                         "reward_std_first": [], "reward_std_recent": []}
        self.history: list[dict] = []
        self.warmstart_metrics: dict[str, float] = {}
        self.last_stop_metrics: dict[str, float] = {}  # the latest step's, for its checkpoint (stop_metrics)
        self.start_step = 0
        if t.resume:
            self._maybe_restore()
        if self.start_step:  # the checkpoint's step logged everything at start_step: what follows is stale
            self.monitor.resumed_at(self.start_step + 1)
        elif log_dir is None and self.monitor.earlier_events and self.checkpointer.latest_step() is None:
            self.monitor.resumed_at(0)  # a run here that never saved (stopped early): its curves are not this one's

    def close(self) -> None:
        """Release what the trainer holds outside this process: its env batches' resources (a remote env
        server's sessions, which otherwise wait out the server's TTL; subprocesses) and the checkpoint manager.
        Idempotent; call it when done with the trainer (run.py does)."""
        for batch in {id(b): b for b in (self.train_env, *self.val_envs)}.values():
            batch.close()
        self.checkpointer.close()
        self.monitor.close()

    def sampling_params(self):
        """The policy's full state in the sampling layout (no fsdp gathers inside the decode loop)."""
        return sharding.reshard_for_sampling(self.actor.full(), self.mesh, layout=self.cfg.mesh.sampling_layout)

    def rebuild_critic_from_policy(self) -> None:
        """Re-initialise the critic from the (warm-started) policy backbone, as at the start of RL."""
        if self.critic is None or self.cfg.model.critic_path:
            return
        critic = setup_lib.make_critic(self.cfg.model, self.actor.module())
        self.critic = sharding.place_for_training(setup_lib.split_model(critic, self.lora, setup_lib.CRITIC_HEAD),
                                                  self.mesh)
        self.critic_opt = sharding.shard_state(self.critic_tx.init(self.critic.trainable), self.mesh)

    def reset_reference(self) -> None:
        """Make the current policy the KL reference (e.g. after the warm start); checkpoints then carry it."""
        if self.need_ref:
            self.ref_params = jax.tree.map(jnp.copy, self.actor.full())
            self.ref_is_initial = False
            self.__dict__.pop("_ref_parts", None)

    # ------------------------------------------------------------------ checkpoints
    def _state(self, with_reference: bool) -> dict:
        state = {"actor": self.actor.trainable, "actor_opt": self.actor_opt}
        if self.critic is not None:
            state.update(critic=self.critic.trainable, critic_opt=self.critic_opt)
        if with_reference:  # the reference's trainable part; its frozen part is the actor's
            state["reference"] = self._ref_split()[0]
        return state

    def save(self, step: int) -> None:
        """Checkpoint `step`: models, optimizers, the KL reference when it is not the initial policy, counters."""
        with_reference = self.need_ref and not self.ref_is_initial
        meta = {"step": step, "counters": self.counters, "history": self.history,
                "collapse": self.collapse.state(), "reference": "saved" if with_reference else "initial",
                "warmstart": self.warmstart_metrics, "stop_metrics": self.last_stop_metrics}
        self.monitor.flush()  # the step's scalars reach disk before the checkpoint that makes it final
        self.checkpointer.save(step, self._state(with_reference), meta)

    def _checkpoint(self, step: int, final: bool = False) -> str | None:
        """Save `step`; a checkpoint that cannot be written (a full disk) is counted and, unless it is the run's
        `final` one (the caller reports that), logged while the run goes on -> None, or why it was not written."""
        try:
            self.save(step)
            return None
        except CheckpointWriteError as e:
            self.counters["checkpoint_save_failures"] += 1
            if not final:
                logger.error("%s The run goes on; the next checkpoint tries again.", e)
            self.monitor.scalars({"checkpoint/save_failures": self.counters["checkpoint_save_failures"]}, step + 1)
            return str(e)

    def _maybe_restore(self) -> None:
        step = self.checkpointer.latest_step()
        if step is None:
            logger.info("No checkpoint in %s; starting fresh.", self.checkpointer.directory)
            return
        if self.checkpointer.restore_meta(step).get("counters", {}).get("steps_run", 1) == 0:
            raise FileExistsError(warm_start_only_error(self.checkpointer.directory, self.workdir, step))
        self.restore(self.checkpointer.directory, step)

    def restore(self, directory: str, step: int) -> None:
        """Load checkpoint `step` of the checkpoints folder `directory` (this run's or another run's)."""
        checkpointer = (self.checkpointer if os.path.abspath(directory) == self.checkpointer.directory
                        else Checkpointer(directory, max_to_keep=None,
                                          barrier_timeout_s=self.cfg.trainer.checkpoint_barrier_timeout_s))
        meta = checkpointer.restore_meta(step)
        with_reference = meta.get("reference") == "saved"
        if with_reference and not self.need_ref:
            logger.warning("Checkpoint %d holds a KL reference this config does not use; ignoring it.", step)
        with_reference = with_reference and self.need_ref
        abstract = jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=x.sharding),
                                self._state(with_reference))
        state, meta = self._restore_state(checkpointer, step, abstract)
        self.actor.trainable, self.actor_opt = state["actor"], state["actor_opt"]
        if self.critic is not None:
            self.critic.trainable, self.critic_opt = state["critic"], state["critic_opt"]
        if with_reference:
            self.ref_params = nnx.merge_state(state["reference"], self.actor.frozen)
            self.ref_is_initial = False
            self.__dict__.pop("_ref_parts", None)
        self.counters.update(meta["counters"])
        if "actor_update_steps" not in meta["counters"]:  # saved before the schedules counted updates: every
            done = int(meta["step"]) + 1                   # step until then had trained
            self.counters.update(actor_update_steps=max(done - self.cfg.trainer.critic_warmup, 0),
                                 critic_update_steps=done)
        self.history = list(meta.get("history", []))
        self.warmstart_metrics = dict(meta.get("warmstart") or {})
        self.collapse.load_state(meta.get("collapse", {}))
        self.last_stop_metrics = dict(meta.get("stop_metrics") or {})
        self.start_step = int(meta["step"]) + 1
        logger.info("Restored step %d from %s.", step, directory)

    @staticmethod
    def _restore_state(checkpointer: Checkpointer, step: int, abstract: dict) -> tuple[dict, dict]:
        """Checkpoint `step` into `abstract` -> (state, meta). A bfloat16 run's checkpoint written before the float32
        master copy (its optimizer states are what is now `.inner`) restores that state and rebuilds the master
        from the restored parameters, as init would."""
        legacy, stored = without_masters(abstract), checkpointer.stored_state(step)
        if (leaf_shapes(stored) == leaf_shapes(abstract) or leaf_shapes(stored) != leaf_shapes(legacy)
                or leaf_dtypes(stored) != leaf_dtypes(legacy)):  # this case exactly, not a float32 run's checkpoint
            return checkpointer.restore(step, abstract)
        state, meta = checkpointer.restore(step, legacy)
        rebuilt = [k for k, v in abstract.items() if isinstance(v, MasterWeights)]
        for key in rebuilt:  # "actor_opt" holds the master of "actor"
            state[key] = with_rebuilt_master(state[key.removesuffix("_opt")], state[key], abstract[key])
        logger.info("Checkpoint %d predates the float32 master copy of bfloat16 parameters (%s): rebuilt it from the "
                    "restored parameters.", step, ", ".join(rebuilt))
        return state, meta

    # ------------------------------------------------------------------ validation
    def run_validation(self, step: int) -> tuple[dict[str, float], list]:
        """Validation episodes of each validation env -> (metrics, episodes): env e's groups take seeds
        val.seed + e * val.groups + g, as RAGEN numbers the groups of all its validation tags (every run alike).
        An env's metrics are under `val/{tag}/`, over its val.groups groups (a last chunk's extra groups are
        played, not kept); the untagged ones (response_length, response_length_per_turn) are over every env's
        episodes."""
        v = self.cfg.val
        per_chunk_groups = self.val_batch // v.group_size
        kept: list[list] = [[] for _ in self.val_envs]
        firsts = range(0, v.groups, per_chunk_groups)
        chunks = [(e, first) for e in range(len(self.val_envs)) for first in firsts]
        for c, (e, first_group) in tqdm(list(enumerate(chunks)), desc="validate", leave=False,
                                        disable=not self.is_main or len(chunks) < 2, dynamic_ncols=True):
            # RAGEN numbers the groups of all validation envs in one run of seeds from val.seed
            seeds, gids = group_seeds(v.seed + e * v.groups + first_group, per_chunk_groups, v.group_size)
            key = jax.random.fold_in(jax.random.fold_in(self.base_key, 10_000_000 + step), c)
            res = self.val_engine.run(self.sampling_params(), self.val_envs[e], seeds, gids + first_group, key,
                                      tag=self.val_tags[e], **validation_sampling(self.cfg))
            kept[e].extend(res.episodes[: v.groups * v.group_size - first_group * v.group_size])
        metrics = {f"val/{k}": value for e, episodes in enumerate(kept)
                   for k, value in episode_metrics(episodes, self.val_tags[e]).items()}
        episodes = [ep for env_episodes in kept for ep in env_episodes]
        metrics["val/response_length"] = response_length(episodes, self.rollout_cfg.context_mode)
        metrics["val/response_length_per_turn"] = response_length_per_turn(episodes)
        return metrics, episodes

    def validate(self, step: int) -> dict[str, float]:
        """Validation at TensorBoard step `step` (0: before any RL step; n: after n steps)."""
        metrics, episodes = self.run_validation(step)
        if any(ep.error for ep in episodes) and self.is_main:
            self._report_env_errors(episodes, f"Validation at step {step}", "left out of its metrics")
        if self.cfg.trainer.dump_rollouts_every:
            self._dump_rollouts("val", step, episodes)
        return metrics

    def _dump_rollouts(self, split: str, step: int, episodes) -> None:
        """rollouts/{split}_step{step}.jsonl, numbered by the TensorBoard and console step (1 = the first RL step)."""
        if self.is_main:
            write_jsonl(os.path.join(self.workdir, "rollouts", f"{split}_step{step}.jsonl"), episodes,
                        **self._dump_kwargs())

    def _dump_kwargs(self) -> dict:
        r = self.cfg.rollout
        return dict(max_tokens=r.response_length, enable_think=r.enable_think, format_penalty=r.format_penalty)

    # ------------------------------------------------------------------ one step
    def train_step(self, step: int) -> dict[str, float]:
        cfg, t = self.cfg, self.cfg.trainer
        timing: dict[str, float] = {}
        key = jax.random.fold_in(self.base_key, step)
        t0 = time.perf_counter()
        seeds, gids = group_seeds(cfg.env.train_seed + step * cfg.env.groups, cfg.env.groups, cfg.env.group_size)
        res = self.engine.run(self.sampling_params(), self.train_env, seeds, gids, key, tag=self.tag,
                              row_multiple=t.mini_batch_size)  # whole mini-batches even when nothing is filtered
        timing["timing_s/rollout"] = time.perf_counter() - t0
        timing.update({f"timing_s/rollout_{k}": v for k, v in res.timing.items()})
        metrics = {f"train/{k}": v for k, v in res.metrics.items()}
        shown = step + 1  # the step TensorBoard and the console show for this one
        if t.dump_rollouts_every and shown % t.dump_rollouts_every == 0:
            self._dump_rollouts("train", shown, res.episodes)
        if t.log_samples_every and shown % t.log_samples_every == 0:
            self._log_sample(res, shown)
        metrics.update(self.collapse.mi_metrics(step + 1, res.episodes, self.actor.graphdef, self.actor.full()))

        rewards = np.array([ep.total_reward for ep in res.episodes], np.float32)
        ok = np.array([not ep.error for ep in res.episodes], bool)  # an episode whose env failed never trains
        metrics["rollout/env_error_ratio"] = float(1.0 - ok.mean())
        if not ok.all():
            self._report_env_errors(res.episodes, f"Step {step + 1}", "left out of the update")
        fres = filter_rollouts(rewards, cfg.env.group_size, self.filter_cfg, valid=ok, **self._filter_inputs(res))
        metrics.update(fres.metrics)
        self.counters["steps_run"] += 1
        self.counters["kept_ratio_sum"] += fres.kept_ratio
        self.counters["empty_streak"], stop_empty, m = update_empty_streak(
            self.counters["empty_streak"], fres, self.filter_cfg.empty_stop_steps)
        metrics.update(m)
        in_group_std = fres.metrics.get("rollout/in_group_reward_std", None)
        self.counters["std_zero_streak"] = zero_std_streak(self.counters["std_zero_streak"], in_group_std,
                                                           measured=fres.measured_groups > 0)
        metrics["early_stop/filter_empty"] = float(stop_empty)
        if fres.empty:
            metrics["train/update_skipped_empty"] = 1.0
            return {**metrics, **timing}
        if in_group_std is not None:
            es = t.early_stop
            first, recent, collapsed = reward_collapse(self.counters["reward_std_first"],
                                                       self.counters["reward_std_recent"], float(in_group_std),
                                                       es.reward_collapse_window, es.reward_collapse_ratio)
            self.counters.update(reward_std_first=first, reward_std_recent=recent)
            metrics["early_stop/reward_collapse"] = float(collapsed)
            if collapsed:  # RAGEN stops before this step's update: the collapsed rollout is not trained on
                metrics["train/update_skipped_reward_collapse"] = 1.0
                return {**metrics, **timing}

        t0 = time.perf_counter()
        batch = res.batch
        trainable = np.isin(batch.episode_ids, fres.kept_traj[ok[fres.kept_traj]])
        rows = np.nonzero(trainable)[0]
        all_arrays = batch.arrays()
        arrays = {k: all_arrays[k] for k in BATCH_KEYS}
        arrays, row_valid = compact(arrays, rows, multiple=t.mini_batch_size)
        # padding rows must not join a real group's statistics (GRPO/RLOO group means) nor a real episode
        for key in ("group_ids", "episode_ids"):
            arrays[key] = np.where(row_valid, arrays[key], -1 - np.arange(len(row_valid))).astype(np.int32)
        arrays["positions"] = scored_positions(arrays["loss_mask"])  # log-probs are needed only where trained
        arrays["row_valid"] = row_valid.astype(np.float32)  # geo_mean's mean counts every real row, not padding
        dev = sharding.shard_batch(arrays, self.mesh)
        dev["old_logprobs"], entropy = self._score_rows(self.fns["score_policy"], self.actor.trainable,
                                                        self.actor.frozen, dev, output=None)
        metrics.update({k: float(v) for k, v in batch_entropy(entropy, dev["loss_mask"], cfg.algo.loss_agg_mode,
                                                              cfg.algo.loss_scale_factor or None).items()})
        dev["sample_logprobs"], context_metrics = in_row_context(dev["old_logprobs"], dev["sample_logprobs"],
                                                                 dev.pop("same_context"), dev["loss_mask"])
        metrics.update({k: float(v) for k, v in context_metrics.items()})
        metrics.update({k: float(v) for k, v in sampler_agreement(dev["old_logprobs"], dev["sample_logprobs"],
                                                                  dev["loss_mask"]).items()})
        if self.need_ref:
            dev["ref_logprobs"] = self._score_rows(self.fns["score_policy"], *self._ref_split(), dev)
        values = (self._score_rows(self.fns["score_values"], self.critic.trainable, self.critic.frozen, dev)
                  if self.critic is not None else jnp.zeros_like(dev["loss_mask"]))
        token_rewards = dev["token_rewards"]
        if cfg.algo.use_kl_in_reward:
            coef = self.counters["kl_in_reward_coef"]
            token_rewards, current_kl = apply_kl_penalty(token_rewards, dev["old_logprobs"], dev["ref_logprobs"],
                                                         dev["loss_mask"], coef, cfg.algo.kl_penalty)
            metrics.update({"actor/reward_kl_penalty": float(current_kl), "actor/reward_kl_penalty_coeff": coef})
            self.counters["kl_in_reward_coef"] = self._next_kl_coef(coef, float(current_kl), int(row_valid.sum()))
        adv, returns = self.fns["advantages"](token_rewards, dev["loss_mask"], values, dev["group_ids"],
                                              dev["episode_ids"])
        adv = adv * advantage_scale(fres.kept_ratio, self.filter_cfg.loss_scaling)
        dev.update(advantages=adv, returns=returns, values=values)
        timing["timing_s/score_and_adv"] = time.perf_counter() - t0
        # veRL's data metrics over the trained tokens; values only with a critic (without one they are zeros)
        token_grids = {"advantages": adv, "returns": returns}
        if self.critic is not None:
            token_grids["values"] = values
        metrics.update({k: float(v) for k, v in token_stats(token_grids, dev["loss_mask"]).items()})
        if self.critic is not None:
            metrics.update({k: float(v) for k, v in explained_variance(returns, values, dev["loss_mask"]).items()})
        # as veRL's data metrics: over the rows trained, score before and rewards after a KL-in-reward penalty
        score = row_total_stats("score", arrays["token_rewards"], row_valid)
        metrics.update(score)
        if cfg.algo.use_kl_in_reward:
            metrics.update(row_total_stats("rewards", sharding.gather_to_host(token_rewards), row_valid))
        else:
            metrics.update({k.replace("/score/", "/rewards/"): v for k, v in score.items()})
        metrics["train/num_samples"] = float(row_valid.sum())
        trained_tokens = float((arrays["loss_mask"] > 0).sum())

        t0 = time.perf_counter()
        metrics.update(self._update(step, dev, row_valid))
        timing["timing_s/update"] = time.perf_counter() - t0
        timing["perf/trained_tokens"] = trained_tokens
        return {**metrics, **timing}

    def _next_kl_coef(self, coef: float, current_kl: float, rows: int) -> float:
        """The KL-in-reward coefficient for the next step: fixed, or veRL's adaptive controller (Ziegler et al.
        2019) moving it towards `algo.kl_ctrl_target` by the step's rows over `algo.kl_ctrl_horizon`."""
        a = self.cfg.algo
        ctrl = init_kl_controller(a.kl_ctrl_type, coef, a.kl_ctrl_target, a.kl_ctrl_horizon)
        return float(update_kl_controller(ctrl, current_kl, rows).value)

    def _report_env_errors(self, episodes, when: str, outcome: str) -> None:
        """One warning: how many `episodes` failed in their env, and the three commonest errors."""
        failed = [ep for ep in episodes if ep.error]
        kinds: dict[str, int] = {}
        for ep in failed:
            kinds[ep.error] = kinds.get(ep.error, 0) + 1
        shown = "; ".join(f"{n} x {text[:200]}" for text, n in sorted(kinds.items(), key=lambda kv: -kv[1])[:3])
        logger.warning("%s: %d of %d episodes failed in the env and are %s: %s", when, len(failed), len(episodes),
                       outcome, shown)

    def _ref_split(self):
        if not hasattr(self, "_ref_parts"):
            _, trainable, frozen = nnx.split(nnx.merge(self.actor.graphdef, self.ref_params),
                                             nnx.LoRAParam if self.lora else nnx.Param, ...)
            self._ref_parts = (trainable, frozen)
        return self._ref_parts

    def _filter_inputs(self, res) -> dict[str, np.ndarray]:
        """Per-trajectory length or entropy [N] for a filter metric that reads them (RAGEN's LengthRolloutFilter /
        EntropyRolloutFilter): trained tokens summed over an episode's rows; each row's mean token entropy under
        the current policy (the log-probs' temperature), averaged over the episode's rows."""
        quantity = metric_quantity(self.filter_cfg.metric)
        if quantity == "reward":
            return {}
        batch, n = res.batch, len(res.episodes)
        mask = batch.loss_mask > 0
        if quantity == "length":
            return {"length": episode_values(mask.sum(axis=1), batch.episode_ids, n, "sum")}
        arrays = {"tokens": batch.tokens, "attention_mask": batch.attention_mask,
                  "positions": scored_positions(batch.loss_mask)}
        dev = sharding.shard_batch(arrays, self.mesh)
        ent = self._score_rows(self.fns["score_policy"], self.actor.trainable, self.actor.frozen, dev, output=1)
        ent = sharding.gather_to_host(ent)
        row = (ent * mask).sum(axis=1) / np.maximum(mask.sum(axis=1), 1)
        return {"entropy": episode_values(row, batch.episode_ids, n, "mean")}

    def _score_rows(self, fn, a, b, dev, output: int | None = 0) -> Any:
        """Apply a scoring function micro-batch by micro-batch: the rows an update holds at once, so memory stays
        bounded by the update's; on a CPU, calls of ~1-2k tokens also keep each op's data in cache (the
        quickstart's 64 x 128 rows score in 63 ms as four 16-row calls, 87 ms as one call). `output` picks the
        array of a function returning several (score_policy: 0 log-probs, 1 entropies; None: all of them)."""
        m = self.cfg.trainer.micro_batch_size
        outs = []
        for i in range(0, dev["tokens"].shape[0], m):
            rows = slice(i, i + m)
            extra = (dev["positions"][rows],) if fn is self.fns["score_policy"] else ()
            out = sharding.settle(fn(a, b, dev["tokens"][rows], dev["attention_mask"][rows], *extra))
            outs.append(out[output] if isinstance(out, tuple) and output is not None else out)
        return jax.tree.map(lambda *parts: jnp.concatenate(parts, axis=0), *outs)

    def _update(self, step: int, dev: dict, row_valid: np.ndarray) -> dict[str, float]:
        t = self.cfg.trainer
        m = t.mini_batch_size
        rng = np.random.default_rng([t.seed, step])
        keys = ["tokens", "attention_mask", "loss_mask", "old_logprobs", "sample_logprobs", "advantages", "positions",
                "row_valid"]
        if self.need_ref:
            keys.append("ref_logprobs")
        critic_keys = ["tokens", "attention_mask", "loss_mask", "values", "returns"]
        actor_metrics, critic_metrics = [], []
        actor_lr, critic_lr = self._learning_rates()
        valid_rows = np.nonzero(row_valid)[0]
        pad_rows = np.nonzero(~row_valid)[0]
        for _ in range(t.epochs):
            order = np.concatenate([rng.permutation(valid_rows), pad_rows])
            for i in range(0, len(order), m):
                idx = order[i:i + m].astype(np.int32)  # the same on every host
                if self.critic is not None:
                    mb = take_rows({k: dev[k] for k in critic_keys}, idx)
                    self.critic.trainable, self.critic_opt, cm = sharding.settle(self.fns["critic_update"](
                        self.critic.trainable, self.critic_opt, self.critic.frozen, mb, jnp.float32(critic_lr)))
                    critic_metrics.append(cm)
                    self._count_update("critic", step, cm)
                if step >= t.critic_warmup:
                    mb = take_rows({k: dev[k] for k in keys}, idx)
                    self.actor.trainable, self.actor_opt, am = sharding.settle(self.fns["actor_update"](
                        self.actor.trainable, self.actor_opt, self.actor.frozen, mb, jnp.float32(actor_lr)))
                    actor_metrics.append(am)
                    self._count_update("actor", step, am)
        self.counters["critic_update_steps"] += self.critic is not None
        self.counters["actor_update_steps"] += step >= t.critic_warmup
        out = {}
        for prefix, ms in (("actor", actor_metrics), ("critic", critic_metrics)):
            out.update({f"{prefix}/{k}": v for k, v in mean_update_metrics(ms).items()})
        out["actor/lr"] = actor_lr
        if self.critic is not None:
            out["critic/lr"] = critic_lr
        return out

    def _learning_rates(self) -> tuple[float, float | None]:
        """(actor, critic) learning rates of the coming update: veRL steps each scheduler once per update call, so
        each schedule is at the number of RL steps its model has trained on. The actor's starts after
        trainer.critic_warmup steps, and a step whose update did not run (the filter kept nothing, the rewards
        collapsed) moves neither."""
        actor = float(self.actor_lr(self.counters["actor_update_steps"]))
        return actor, None if self.critic is None else float(self.critic_lr(self.counters["critic_update_steps"]))

    def _count_update(self, model: str, step: int, metrics: dict) -> None:
        """Counts applied and skipped updates; a skipped one (non-finite loss, gradient or new weights) is
        reported on the console as it happens."""
        if float(metrics["update_skipped"]) > 0:
            self.counters["updates_skipped"] += 1
            self.counters["skipped_in_a_row"] += 1
            logger.warning("Step %d: %s update skipped (non-finite loss %.4g, gradient norm %.4g, or new weights); "
                           "parameters and optimizer state kept.", step + 1, model, float(metrics.get(
                               "loss", metrics.get("vf_loss", np.nan))), float(metrics["grad_norm"]))
        else:
            self.counters["updates_applied"] += 1
            self.counters["skipped_in_a_row"] = 0

    def _log_sample(self, res, step: int) -> None:
        from ragen_jax.rollout.dump import trajectory_sample_text

        self.monitor.text("samples/trajectory", trajectory_sample_text(res.episodes, **self._dump_kwargs()), step)

    # ------------------------------------------------------------------ the run
    def _early_stop(self, metrics: dict) -> str | None:
        return early_stop_reason(metrics, self.counters, self.cfg.trainer.early_stop, self.filter_cfg.empty_stop_steps)

    def _resumed_early_stop(self) -> str | None:
        """Why the restored run stopped early after its checkpoint's step (judged under this config's stops), so
        the resume trains no further step, as the run did not; None for a fresh run or one that goes on."""
        if self.start_step == 0:
            return None
        reason = resumed_stop_reason(self.last_stop_metrics, self.counters, self.cfg.trainer.early_stop,
                                     self.filter_cfg.empty_stop_steps)
        if reason:
            logger.warning("The run in %s stopped early after step %d (%s): this resume trains no further step. To "
                           "train on from it, turn that stop off or loosen it (trainer.early_stop.*, "
                           "filter.empty_stop_steps).", self.workdir, self.start_step, reason)
        return reason

    def _record_val(self, step: int, metrics: dict, streak: bool = True) -> None:
        """The history follows the first validation env; the low-success streak is counted per env (RAGEN), over
        the validations after RL steps (`streak`): RAGEN's validation before training does not count, nor one where
        every episode of the env failed (a dead env server is not a policy that fails)."""
        below = self.cfg.trainer.early_stop.val_success_below
        streaks = self.counters["val_low_streaks"]
        for tag in self.val_tags if streak else ():
            if metrics.get(f"val/{tag}/env_error", 0.0) >= 1.0:
                continue  # every episode's env failed: no word on the policy, so the streak neither grows nor ends
            low = metrics.get(f"val/{tag}/success", 0.0) < below
            streaks[tag] = streaks.get(tag, 0) + 1 if low else 0
        self.history.append({"step": step, "val_success": metrics.get(f"val/{self.val_tag}/success", 0.0)})

    def activate_mesh(self):
        """Context making the trainer's mesh the active one, so the models' activation sharding hints apply."""
        return jax.set_mesh(self.mesh)

    def train(self) -> dict[str, Any]:
        """Warm start (if configured), then RL steps with validation, logging and checkpoints -> summary."""
        with self.activate_mesh():
            return self._train()

    def _train(self) -> dict[str, Any]:
        cfg, t = self.cfg, self.cfg.trainer
        if self.start_step == 0 and (error := earlier_run_error(self.checkpointer.directory)):
            raise FileExistsError(error)  # before any work: a fresh run never mixes with an earlier one
        if (partial := self.checkpointer.remove_partial_saves()) and self.is_main:
            logger.warning("Removed %d partial checkpoint folder(s) of a save cut short by an earlier process: %s",
                           len(partial), ", ".join(partial))
        wall0 = time.perf_counter()
        self.record_config()
        if cfg.warmstart.enabled and self.start_step == 0:
            from ragen_jax.trainer.warmstart import run_warmstart

            self.warmstart_metrics = run_warmstart(self)  # validates before and after; resets the KL reference
            self.rebuild_critic_from_policy()
            self.history.append({"step": 0, "val_success": self.warmstart_metrics["val_success_before_warmstart"],
                                 "phase": "before_warmstart"})
            self.history.append({"step": 0, "val_success": self.warmstart_metrics["val_success_after_warmstart"],
                                 "phase": "after_warmstart"})
            after = {f"val/{k[len('val_after_warmstart/'):]}": v for k, v in self.warmstart_metrics.items()
                     if k.startswith("val_after_warmstart/")}
            self.monitor.scalars(after, 0)
        elif cfg.val.every and cfg.val.at_start and self.start_step == 0:
            vm = self.validate(0)
            self._record_val(0, vm, streak=False)
            self.monitor.scalars(vm, 0)
        resumed_stop = self._resumed_early_stop()
        if self.start_step >= t.total_steps > 0 and not resumed_stop:
            logger.warning("The run in %s already trained its %d steps (trainer.total_steps): nothing is left to "
                           "train; the summary, the final validation and the export are written again. To train on, "
                           "raise --config.trainer.total_steps.", self.workdir, t.total_steps)
        bar = tqdm(range(self.start_step, self.start_step if resumed_stop else t.total_steps), desc="train",
                   disable=not self.is_main, initial=self.start_step, total=t.total_steps, dynamic_ncols=True)
        stops = StopRequests()
        failures = []  # outputs the run could not write: reported once the rest is written
        with stops:  # the final save too: a signal while it writes (the run's only checkpoint at save_every=0)
            last, stop_reason, saved, trained_tokens, rl_step_s = self._rl_steps(bar, stops)
            bar.close()
            if last >= self.start_step and saved != last and (error := self._checkpoint(last, final=True)):
                failures.append(f"The run's final state (after step {last + 1}) was not saved: {error} Then "
                                "continue from there with --config.trainer.resume=True and the same --workdir.")
        stop_reason = stop_reason or resumed_stop
        signal_name = stops.agreed()  # also one that came after the last step: every process ends alike
        if signal_name:  # the user or the scheduler wants the process gone: no final validation or export
            if not failures:
                logger.warning("Stopped by %s after step %d; checkpoint %s/%d saved. Continue with "
                               "--config.trainer.resume=True and the same --workdir.", signal_name, last + 1,
                               self.checkpointer.directory, last)
        elif cfg.val.every and (not self.history or self.history[-1]["step"] != last + 1):
            vm = self.validate(last + 1)
            self._record_val(last + 1, vm)
            self.monitor.scalars(vm, last + 1)
        wall = time.perf_counter() - wall0
        summary = report.run_summary(self, wall, trained_tokens, stop_reason, rl_step_s)
        summary["stopped_by_signal"] = signal_name
        if last >= self.start_step and not failures:
            summary["outputs"].append(f"Checkpoint after {last + 1} RL steps: {self.checkpointer.directory}/{last}")
        if t.export_hf and not signal_name:
            folder = os.path.join(self.workdir, "hf_export")
            try:
                summary["outputs"].append(f"Hugging Face folder: {self.export(folder)}")
            except OSError as e:
                failures.append(f"The Hugging Face export to {folder} failed ({type(e).__name__}: {e}). Free space "
                                "there, then run the same command with --config.trainer.resume=True: it trains no "
                                "step again and writes the export.")
        summary["failures"] = failures
        self.monitor.flush()
        if self.is_main:
            try:
                with open(os.path.join(self.workdir, "summary.json"), "w") as f:
                    json.dump(summary, f, indent=2)
            except OSError as e:
                failures.append(f"{self.workdir}/summary.json could not be written ({e}).")
        self.monitor.close()
        if failures:
            raise CheckpointWriteError(" ".join(failures))
        return summary

    def record_config(self) -> None:
        """The resolved config to the workdir's config.json (process 0) and to TensorBoard (hparams and text)."""
        if self.is_main:
            if self.start_step and (warning := resumed_config_warning(self.workdir, self.cfg)):
                logger.warning(warning)
            write_config_json(self.workdir, self.cfg)
        self.monitor.config(flatten_config(self.cfg.to_dict()))

    def _rl_steps(self, bar, stops: StopRequests) -> tuple[int, str | None, int | None, float, float]:
        """The RL steps of `bar` until the end, an early stop or a stop request -> (last step run, stop reason,
        last step saved, tokens trained, the steps' summed `timing_s/step` seconds)."""
        cfg, t = self.cfg, self.cfg.trainer
        stop_reason, saved, step, trained_tokens, rl_step_s = None, None, self.start_step - 1, 0.0, 0.0
        for step in bar:
            t0 = time.perf_counter()
            metrics = self.train_step(step)
            metrics.update(self.collapse.warnings(metrics))
            self.last_stop_metrics = stop_metrics(metrics)  # before the checkpoint, which keeps them
            trained_tokens += metrics.get("perf/trained_tokens", 0.0)
            metrics["timing_s/step"] = time.perf_counter() - t0
            rl_step_s += metrics["timing_s/step"]
            if cfg.val.every and (step + 1) % cfg.val.every == 0:
                vm = self.validate(step + 1)
                self._record_val(step + 1, vm)
                metrics.update(vm)
            self.monitor.scalars(metrics, step + 1)
            bar.set_postfix({"succ": f"{metrics.get(f'train/{self.tag}/success', 0):.2f}",
                             "val": f"{self.history[-1]['val_success']:.2f}" if self.history else "-",
                             "kept": f"{metrics.get('rollout/filter_kept_ratio', 1):.2f}"})
            if t.save_every and (step + 1) % t.save_every == 0 and self._checkpoint(step) is None:
                saved = step
            stop_reason = self._early_stop(metrics)
            if stop_reason:
                logger.warning("Early stop at step %d: %s.", step + 1, stop_reason)
                break
            if stops.agreed():
                stop_reason = stop_message(stops.received)
                break
        return step, stop_reason, saved, trained_tokens, rl_step_s

    def export(self, folder: str) -> str:
        """Write the policy as a Hugging Face folder (LoRA merged) that transformers can load.

        Every process calls it (the parameters are gathered from all hosts); process 0 writes.
        """
        from ragen_jax.models import merge_lora, save_pretrained

        params = self.actor.full()
        if jax.process_count() > 1:
            params = jax.tree.map(jnp.asarray, sharding.gather_to_host(params))
        model = nnx.merge(self.actor.graphdef, params)
        if self.lora:
            model = merge_lora(model)
        if self.is_main:
            save_pretrained(model, folder, tokenizer=self.tokenizer,
                            training_record={"rl_steps": int(self.counters["steps_run"])})
        return folder
