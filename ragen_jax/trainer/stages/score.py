"""Stages 3 and 4, score and advantages: the kept rows on the devices, scored by the policy before its update (old
log-probs, entropy), the KL reference and the critic; KL-in-reward; then the advantages and returns.

Scoring runs micro-batch by micro-batch (`score_rows`), so its memory stays bounded by the update's.
"""

from __future__ import annotations

import dataclasses
import time
from typing import Any, Callable

import jax
import jax.numpy as jnp
import numpy as np

from ragen_jax import sharding
from ragen_jax.algos.kl import apply_kl_penalty, init_kl_controller, update_kl_controller
from ragen_jax.filtering import advantage_scale, compact
from ragen_jax.rollout.types import TrajectoryBatch
from ragen_jax.trainer.batch_stats import (batch_entropy, explained_variance, in_row_context, row_total_stats,
                                           sampler_agreement, token_stats)
from ragen_jax.trainer.steps import scored_positions
from ragen_jax.trainer.vision_scoring import IMAGE_KEYS, row_image_arrays

# what the update reads of a rollout's batch
BATCH_KEYS = ("tokens", "attention_mask", "loss_mask", "sample_logprobs", "token_rewards", "group_ids",
              "episode_ids", "same_context")


@dataclasses.dataclass
class TrainingBatch:
    """The rows that train, on the devices: `dev` arrays [M, ...] (M a multiple of the mini-batch), `host` their
    numpy copies, `row_valid` [M] the real rows (the rest pad the last mini-batch)."""

    dev: dict[str, jax.Array]
    host: dict[str, np.ndarray]
    row_valid: np.ndarray
    seconds: float = 0.0

    @property
    def trained_tokens(self) -> float:
        return float((self.host["loss_mask"] > 0).sum())


def training_batch(batch: TrajectoryBatch, rows: np.ndarray, mini_batch_size: int, mesh,
                   vl_config: Any = None) -> TrainingBatch:
    """Rows `rows` of a rollout's batch, compacted to whole mini-batches and placed on the mesh. Padding rows
    join no real group's statistics (GRPO/RLOO group means) nor a real episode. Rows with pictures (a
    vision-language policy's, `vl_config` its VLConfig) carry them as per-row arrays (`vision_scoring.IMAGE_KEYS`)."""
    t0 = time.perf_counter()
    all_arrays = batch.arrays()
    keys = BATCH_KEYS
    if batch.images is not None:
        if vl_config is None:
            raise ValueError("The batch's rows hold pictures but the policy is not a vision-language model.")
        all_arrays.update(row_image_arrays(batch.tokens, batch.attention_mask, batch.images, vl_config))
        keys = BATCH_KEYS + IMAGE_KEYS
    arrays, row_valid = compact({k: all_arrays[k] for k in keys}, rows, multiple=mini_batch_size)
    for key in ("group_ids", "episode_ids"):
        arrays[key] = np.where(row_valid, arrays[key], -1 - np.arange(len(row_valid))).astype(np.int32)
    arrays["positions"] = scored_positions(arrays["loss_mask"])  # log-probs are needed only where trained
    arrays["row_valid"] = row_valid.astype(np.float32)  # geo_mean's mean counts every real row, not padding
    dev = sharding.shard_batch(arrays, mesh)
    return TrainingBatch(dev, arrays, row_valid, time.perf_counter() - t0)


def score_rows(fn: Callable, a: Any, b: Any, dev: dict, micro: int, *, with_positions: bool,
               output: int | None = 0) -> Any:
    """Apply a scoring function micro-batch by micro-batch: the rows an update holds at once, so memory stays
    bounded by the update's; on a CPU, calls of ~1-2k tokens also keep each op's data in cache
    (experiments/bench/profile_steps.py). `output` picks the array of a function returning several (the policy's
    scoring: 0 log-probs, 1 entropies; None: all of them)."""
    outs = []
    for i in range(0, dev["tokens"].shape[0], micro):
        rows = slice(i, i + micro)
        extra = (dev["positions"][rows],) if with_positions else ()
        if with_positions and IMAGE_KEYS[0] in dev:  # a vision-language policy's rows
            extra += ({k: dev[k][rows] for k in IMAGE_KEYS},)
        out = sharding.settle(fn(a, b, dev["tokens"][rows], dev["attention_mask"][rows], *extra))
        outs.append(out[output] if isinstance(out, tuple) and output is not None else out)
    return jax.tree.map(lambda *parts: jnp.concatenate(parts, axis=0), *outs)


@dataclasses.dataclass
class Scored:
    """A training batch with what the update reads besides it: old (and reference) log-probs, values, token
    rewards after KL-in-reward; `next_kl_coef` is the KL-in-reward coefficient for the next step."""

    batch: TrainingBatch
    token_rewards: jax.Array
    values: jax.Array
    metrics: dict[str, float]
    next_kl_coef: float
    seconds: float


def score(models, fns: dict, batch: TrainingBatch, algo: Any, micro: int, kl_coef: float) -> Scored:
    """Score the batch under the policy before its update (old log-probs and entropy), the reference and the
    critic, and apply the KL-in-reward penalty (algo: the config's algo section)."""
    t0 = time.perf_counter()
    dev, metrics = batch.dev, {}
    policy = fns["score_policy"]
    dev["old_logprobs"], entropy = score_rows(policy, models.actor.trainable, models.actor.frozen, dev, micro,
                                              with_positions=True, output=None)
    metrics.update({k: float(v) for k, v in batch_entropy(entropy, dev["loss_mask"], algo.loss_agg_mode,
                                                          algo.loss_scale_factor or None).items()})
    dev["sample_logprobs"], context_metrics = in_row_context(dev["old_logprobs"], dev["sample_logprobs"],
                                                             dev.pop("same_context"), dev["loss_mask"])
    metrics.update({k: float(v) for k, v in context_metrics.items()})
    metrics.update({k: float(v) for k, v in sampler_agreement(dev["old_logprobs"], dev["sample_logprobs"],
                                                              dev["loss_mask"]).items()})
    if models.need_ref:
        dev["ref_logprobs"] = score_rows(policy, *models.reference_split(), dev, micro, with_positions=True)
    values = (score_rows(fns["score_values"], models.critic.trainable, models.critic.frozen, dev, micro,
                         with_positions=False) if models.critic is not None else jnp.zeros_like(dev["loss_mask"]))
    token_rewards, next_coef = dev["token_rewards"], kl_coef
    if algo.use_kl_in_reward:
        token_rewards, current_kl = apply_kl_penalty(token_rewards, dev["old_logprobs"], dev["ref_logprobs"],
                                                     dev["loss_mask"], kl_coef, algo.kl_penalty)
        metrics.update({"actor/reward_kl_penalty": float(current_kl), "actor/reward_kl_penalty_coeff": kl_coef})
        next_coef = next_kl_coef(algo, kl_coef, float(current_kl), int(batch.row_valid.sum()))
    return Scored(batch, token_rewards, values, metrics, next_coef, time.perf_counter() - t0)


def next_kl_coef(algo: Any, coef: float, current_kl: float, rows: int) -> float:
    """The KL-in-reward coefficient for the next step: fixed, or veRL's adaptive controller (Ziegler et al.
    2019) moving it towards `algo.kl_ctrl_target` by the step's rows over `algo.kl_ctrl_horizon`."""
    ctrl = init_kl_controller(algo.kl_ctrl_type, coef, algo.kl_ctrl_target, algo.kl_ctrl_horizon)
    return float(update_kl_controller(ctrl, current_kl, rows).value)


def advantages(fns: dict, scored: Scored, kept_ratio: float, loss_scaling: str, use_kl_in_reward: bool,
               with_critic: bool) -> tuple[TrainingBatch, dict[str, float], float]:
    """Advantages and returns into the batch (scaled by the filter's kept ratio as filter.loss_scaling says), with
    veRL's data metrics over the trained tokens and rows -> (batch ready to update on, metrics, the scoring and
    advantage stages' seconds)."""
    t0 = time.perf_counter()
    batch, dev = scored.batch, scored.batch.dev
    adv, returns = fns["advantages"](scored.token_rewards, dev["loss_mask"], scored.values, dev["group_ids"],
                                     dev["episode_ids"])
    adv = adv * advantage_scale(kept_ratio, loss_scaling)
    dev.update(advantages=adv, returns=returns, values=scored.values)
    seconds = batch.seconds + scored.seconds + time.perf_counter() - t0
    metrics = dict(scored.metrics)
    token_grids = {"advantages": adv, "returns": returns}  # values only with a critic (without one they are zeros)
    if with_critic:
        token_grids["values"] = scored.values
    metrics.update({k: float(v) for k, v in token_stats(token_grids, dev["loss_mask"]).items()})
    if with_critic:
        metrics.update({k: float(v) for k, v in explained_variance(returns, scored.values, dev["loss_mask"]).items()})
    # as veRL's data metrics: over the rows trained, score before and rewards after a KL-in-reward penalty
    score_stats = row_total_stats("score", batch.host["token_rewards"], batch.row_valid)
    metrics.update(score_stats)
    if use_kl_in_reward:
        metrics.update(row_total_stats("rewards", sharding.gather_to_host(scored.token_rewards), batch.row_valid))
    else:
        metrics.update({k.replace("/score/", "/rewards/"): v for k, v in score_stats.items()})
    metrics["train/num_samples"] = float(batch.row_valid.sum())
    return batch, metrics, seconds
