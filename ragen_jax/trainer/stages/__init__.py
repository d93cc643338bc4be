"""The StarPO training step as a list of stages, each a function of typed inputs returning a typed result:

    collect (rollout) -> select (SNR filter, env failures) -> score (old / reference log-probs, values,
    KL-in-reward) -> advantages -> update (PPO epochs over mini-batches) -> report (the step's metrics)

`Trainer.train_step` calls them in that order; a schedule that overlaps them (asynchronous training) or changes
what a stage sees (images) recomposes the same functions.
"""

from ragen_jax.trainer.stages.collect import Collected, collect, step_seeds
from ragen_jax.trainer.stages.report import skipped_update, step_report
from ragen_jax.trainer.stages.score import (BATCH_KEYS, Scored, TrainingBatch, advantages, next_kl_coef, score,
                                            score_rows, training_batch)
from ragen_jax.trainer.stages.select import Selection, filter_inputs, select
from ragen_jax.trainer.stages.update import Updated, mini_batch_order, update

__all__ = ["BATCH_KEYS", "Collected", "Scored", "Selection", "TrainingBatch", "Updated", "advantages", "collect",
           "filter_inputs", "mini_batch_order", "next_kl_coef", "score", "score_rows", "select", "skipped_update",
           "step_report", "step_seeds", "training_batch", "update"]
