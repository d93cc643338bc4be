"""Offline gradient analysis of saved rollouts: `python -m ragen_jax.diagnostics ROLLOUTS.pkl --checkpoint RUN
--analysis gradients` (trainer/gradient_split.py's split, RAGEN's names).

It runs the trainer's own stages on a run folder's checkpoint and a PKL of played episodes: the run's models
(`RLModels`: policy, critic, and the KL reference saved with the checkpoint or the initial policy) restored from
the checkpoint, the rows (the PKL's training batch when it holds one, as `rollout.dump.write_pkl` of a training
step's result does; else rebuilt from the episodes with the run's rollout settings), then select (the run's
filter), training_batch, score, advantages and the split of `split_training_batch`, the function the trainer
calls before its update. With checkpoint N-1 and the rollouts of step N the numbers are the trainer's at step N.
Rebuilt rows have no sampler log-probs: the trainer's old log-probs stand in (a rollout correction then weighs
every token 1).
"""

from __future__ import annotations

import logging
import os
import pickle
from typing import Any

import numpy as np

from ragen_jax.diagnostics.buckets import Bucket, episode_reward_std, variance_buckets

logger = logging.getLogger(__name__)


def group_size_of(group_ids: np.ndarray) -> int:
    """The size of the episodes' groups, which must be contiguous and equal (as a rollout plays them)."""
    group_ids = np.asarray(group_ids)
    starts = np.flatnonzero(np.r_[True, group_ids[1:] != group_ids[:-1]])
    sizes = np.diff(np.r_[starts, group_ids.size])
    if np.unique(group_ids).size != starts.size or np.unique(sizes).size != 1:
        raise ValueError("The episodes' groups must be contiguous and of one size, as one rollout plays them "
                         f"(group sizes here: {sorted(set(sizes.tolist()))}); pass the dump of one rollout.")
    return int(sizes[0])


def stored_batch(path: str):
    """The training batch a PKL holds (write_pkl of a training step's RolloutResult), or None (an evaluation's,
    or one written before a field the batch now has)."""
    from ragen_jax.rollout.types import TrajectoryBatch

    with open(path, "rb") as f:
        data = pickle.load(f)
    arrays = data.get("batch") if isinstance(data, dict) else None
    try:
        return TrajectoryBatch(**arrays) if isinstance(arrays, dict) else None
    except TypeError:
        return None


def rollout_of(path: str, episodes: list, run: Any, tokenizer: Any):
    """(RolloutResult, whether its rows keep the sampler's log-probs) of a PKL's episodes."""
    from ragen_jax.rollout import RolloutConfig
    from ragen_jax.rollout.context import ContextBuilder
    from ragen_jax.rollout.episodes import finish_rollout
    from ragen_jax.rollout.types import RolloutResult

    batch = stored_batch(path)
    if batch is not None and int(np.max(batch.episode_ids, initial=-1)) < len(episodes):
        return RolloutResult(episodes=episodes, batch=batch, metrics={}, timing={}), True
    cfg = RolloutConfig.of(run)
    logprobs = {(i, t): (np.zeros(len(r.response_tokens), np.float32),) * 2
                for i, ep in enumerate(episodes) for t, r in enumerate(ep.history) if r.response_tokens is not None}
    return finish_rollout(ContextBuilder(tokenizer, enable_think=cfg.enable_think, action_format=cfg.action_format),
                          cfg, tokenizer, episodes,
                          logprobs, tag="", timing={}, row_multiple=1), False


def offline_gradient_split(rollouts: str, run_dir: str, *, checkpoint_step: int | None = None,
                           num_buckets: int = 6, bucket_mode: str = "quantile", prefilter: bool = False,
                           mini_batch_size: int | None = None,
                           micro_batch_size: int | None = None) -> tuple[dict[str, float], dict[str, Bucket]]:
    """RAGEN-2's gradient split of a PKL of played episodes under a run's checkpoint -> (metrics, buckets).

    The filter's kept groups under "grad_norm/" (and actor/grad_norm/*), or with `prefilter` every group under
    "grad_norm_prefilter/" (RAGEN's gradient_analysis_log_prefilter). Mini- and micro-batch sizes default to the
    run's trainer.mini_batch_size / micro_batch_size."""
    from ragen_jax import sharding
    from ragen_jax.algos.settings import AlgoSettings
    from ragen_jax.checkpoint import Checkpointer
    from ragen_jax.config import RunConfig
    from ragen_jax.config.files import read_config_json
    from ragen_jax.diagnostics.offline import load_dump
    from ragen_jax.diagnostics.policy import is_hf_folder, pick_checkpoint
    from ragen_jax.errors import MissingFileError
    from ragen_jax.trainer import RLModels, RunState, stages
    from ragen_jax.trainer.gradient_split import split_training_batch
    from ragen_jax.trainer.steps import make_step_fns

    kind, episodes = load_dump(rollouts)
    if kind != "episodes":
        raise ValueError(f"{rollouts!r} holds trajectory records (text); the gradient split needs played episodes "
                         "(a .pkl of {'episodes': [...]}: run.py --mode=eval's rollouts.pkl, or "
                         "rollout.dump.write_pkl of a training step's RolloutResult), whose exact tokens, turn "
                         "rewards and contexts rebuild the trainer's rows.")
    config = None if is_hf_folder(run_dir) else read_config_json(run_dir)
    if not os.path.isdir(os.path.join(run_dir, "checkpoints")) or config is None:
        raise MissingFileError(f"--checkpoint {run_dir!r} is not a run folder with config.json and checkpoints/; the "
                               "gradient analysis needs one (the run's config, checkpointed policy, critic and KL "
                               "reference rebuild what the trainer differentiates).")
    run = RunConfig.from_config(config)
    micro = micro_batch_size or run.trainer.micro_batch_size
    mini = mini_batch_size or run.trainer.mini_batch_size
    step = pick_checkpoint(run_dir, checkpoint_step)
    mesh = sharding.make_mesh(run.mesh)
    models = RLModels.build(run, mesh)
    checkpointer = Checkpointer(os.path.join(run_dir, "checkpoints"), max_to_keep=None)
    try:
        saved_ref = checkpointer.restore_meta(step).get("reference") == "saved"
        meta = models.restore(checkpointer, step, saved_ref and models.need_ref)
    finally:
        checkpointer.close()
    state = RunState(kl_in_reward_coef=float(run.algo.kl_ctrl_coef))
    state.load_meta(meta, run.trainer.critic_warmup)
    algo = AlgoSettings.of(run)
    critic = models.critic
    fns = make_step_fns(models.actor.graphdef, critic.graphdef if critic else None, algo, models.actor_optim.tx,
                        models.critic_optim.tx if critic else None, micro)
    result, exact = rollout_of(rollouts, episodes, run, models.tokenizer)

    def score_entropy(arrays: dict) -> np.ndarray:
        dev = sharding.shard_batch(arrays, mesh)
        return sharding.gather_to_host(stages.score_rows(fns["score_policy"], models.actor.trainable,
                                                         models.actor.frozen, dev, micro, with_positions=True,
                                                         output=1))

    group_size = group_size_of([ep.group_id for ep in episodes])
    selection = stages.select(result, group_size, run.filter, score_entropy)
    rows = (np.flatnonzero(np.isin(result.batch.episode_ids, np.flatnonzero(selection.ok))) if prefilter
            else selection.rows)
    if rows.size == 0:
        raise ValueError("The filter kept no group of these rollouts: nothing to split (pass --prefilter to split "
                         "every group).")
    batch = stages.training_batch(result.batch, rows, mini, mesh)
    scored = stages.score(models, fns, batch, run.algo, micro, state.kl_in_reward_coef)
    if not exact:  # no sampler log-probs in the dump: the trainer's stand in
        batch.dev["sample_logprobs"] = batch.dev["old_logprobs"]
    batch, _, _ = stages.advantages(fns, scored, 1.0 if prefilter else selection.filter.kept_ratio,
                                    run.filter.loss_scaling, run.algo.use_kl_in_reward, critic is not None)
    logger.info("gradient split: checkpoint %d of %s, %d rows (%s; %s), mini-batches of %d rows", step, run_dir,
                rows.size, "every group" if prefilter else "the filter's groups",
                "the PKL's training batch" if exact else "rows rebuilt from the episodes", mini)
    metrics = split_training_batch(models, batch, episodes, algo, mini_batch_size=mini, micro_batch_size=micro,
                                   num_buckets=num_buckets, bucket_mode=bucket_mode,
                                   prefix="grad_norm_prefilter" if prefilter else "grad_norm",
                                   mirror_all=not prefilter)
    ep_std = episode_reward_std([ep.total_reward for ep in episodes], [ep.group_id for ep in episodes], selection.ok)
    ids = result.batch.episode_ids[rows]
    return metrics, variance_buckets(result.batch.group_ids[rows], ep_std[ids], num_buckets=num_buckets,
                                     mode=bucket_mode)
