"""Stage 5, update: PPO epochs over mini-batches of the scored rows, the critic first, then the actor (after
trainer.critic_warmup steps); each update applies only when its loss, gradient and new weights are finite."""

from __future__ import annotations

import dataclasses
import time
from typing import Any

import jax.numpy as jnp
import numpy as np

from ragen_jax import sharding
from ragen_jax.trainer.batch_stats import take_rows
from ragen_jax.trainer.steps import mean_update_metrics
from ragen_jax.trainer.stages.score import TrainingBatch

ACTOR_KEYS = ("tokens", "attention_mask", "loss_mask", "old_logprobs", "sample_logprobs", "advantages", "positions",
              "row_valid")
CRITIC_KEYS = ("tokens", "attention_mask", "loss_mask", "values", "returns")


@dataclasses.dataclass
class Updated:
    """What a step's updates did: each update's (model, metrics) in order (the run counts the skipped ones), the
    step's mean metrics and whether each model trained this step."""

    updates: list[tuple[str, dict[str, Any]]]
    metrics: dict[str, float]
    actor_trained: bool
    critic_trained: bool
    seconds: float


def mini_batch_order(rng: np.random.Generator, row_valid: np.ndarray) -> np.ndarray:
    """One epoch's row order: the real rows shuffled, then the padding rows (the same on every host)."""
    return np.concatenate([rng.permutation(np.nonzero(row_valid)[0]), np.nonzero(~row_valid)[0]])


def update(models, fns: dict, batch: TrainingBatch, step: int, trainer: Any, learning_rates: tuple) -> Updated:
    """Train the critic and the actor on `batch` (trainer: the config's trainer section; learning_rates: (actor,
    critic) of this step) -> Updated. New parameters and optimizer states go back into `models`."""
    t0 = time.perf_counter()
    dev, m = batch.dev, trainer.mini_batch_size
    rng = np.random.default_rng([trainer.seed, step])
    actor_keys = ACTOR_KEYS + (("ref_logprobs",) if models.need_ref else ())
    actor_lr, critic_lr = learning_rates
    actor_trains = step >= trainer.critic_warmup
    actor_metrics, critic_metrics, updates = [], [], []
    for _ in range(trainer.epochs):
        order = mini_batch_order(rng, batch.row_valid)
        for i in range(0, len(order), m):
            idx = order[i:i + m].astype(np.int32)
            if models.critic is not None:
                c, opt = models.critic, models.critic_optim
                c.trainable, opt.state, out = sharding.settle(fns["critic_update"](
                    c.trainable, opt.state, c.frozen, take_rows({k: dev[k] for k in CRITIC_KEYS}, idx),
                    jnp.float32(critic_lr)))
                critic_metrics.append(out)
                updates.append(("critic", out))
            if actor_trains:
                a, opt = models.actor, models.actor_optim
                a.trainable, opt.state, out = sharding.settle(fns["actor_update"](
                    a.trainable, opt.state, a.frozen, take_rows({k: dev[k] for k in actor_keys}, idx),
                    jnp.float32(actor_lr)))
                actor_metrics.append(out)
                updates.append(("actor", out))
    metrics = {}
    for prefix, outs in (("actor", actor_metrics), ("critic", critic_metrics)):
        metrics.update({f"{prefix}/{k}": v for k, v in mean_update_metrics(outs).items()})
    metrics["actor/lr"] = actor_lr
    if models.critic is not None:
        metrics["critic/lr"] = critic_lr
    return Updated(updates, metrics, actor_trains, models.critic is not None, time.perf_counter() - t0)
