"""RAGEN-2's gradient analysis: the actor's gradient norm split into its task, entropy and KL parts, per
reward-variance bucket (RAGEN's `gradient_reporter.py` and the `grad_component_analysis` path of its
`dp_actor.update_policy`), at the current parameters, without an update.

Definitions. A bucket's rows (diagnostics/buckets.py) are cut, in batch order, into mini-batches M_1..M_K of
`mini_batch_size` rows (the last one topped up with rows that train nothing), each into micro-batches as the
update does. For one mini-batch M the update's loss is L(M) = sum over components c of L_c(M), with
    L_task(M)    = the policy loss (the configured one, rollout correction applied) aggregated by loss_agg_mode,
    L_entropy(M) = -entropy_coeff * the token entropy aggregated the same way,
    L_kl(M)      = kl_loss_coef * kl_penalty(log p, log p_ref, kl_loss_type) aggregated the same way,
each summed over the micro-batches with the update's denominators (`steps.make_actor_loss`: the same terms
the update differentiates). g_c(M) is the gradient of L_c(M) alone over the trainable parameters (the LoRA
adapters under LoRA), accumulated in float32. Components: task always, entropy when entropy_coeff != 0, kl
with use_kl_loss (RAGEN runs a backward pass only for those). Then, under RAGEN's names:
    grad_norm/<bucket>/<c>              = mean over k of ||g_c(M_k)||  (RAGEN: one backward pass per component
                                          and mini-batch, veRL's clip_grad_norm_ total norm, reduce_metrics'
                                          mean over mini-batches)
    grad_norm/<bucket>/per_sample/<c>   = that / the bucket's rows;  .../per_token/<c> = that / its trained tokens
    grad_norm/<bucket>/loss/<l>         = mean over k of L_c(M_k), l = policy | entropy | kl, and loss/total
                                          their sum
and the "all" bucket's copies actor/grad_norm/<c> and actor/loss/<l>. Ours besides (no RAGEN counterpart):
    grad_norm/<bucket>/total            = mean over k of ||sum_c g_c(M_k)||, the gradient norm the update
                                          itself measures (its actor/grad_norm, before clipping) for M_k
    grad_norm/<bucket>/regularizer      = mean over k of ||g_entropy(M_k) + g_kl(M_k)||
    grad_norm/<bucket>/cos/<a>_<b>      = mean over k of cos(g_a(M_k), g_b(M_k)) (0 where a part is zero)

What adds up: the losses, exactly (loss/total = policy + entropy + kl, as RAGEN's actor/loss/total), and the
gradient vectors (sum_c g_c = the update's gradient). The norms do not: per mini-batch
||g_total||^2 = sum_c ||g_c||^2 + 2 sum_{a<b} ||g_a|| ||g_b|| cos(g_a, g_b), so the norms add only for parallel
parts and the squared norms only for orthogonal ones. RAGEN logs no total gradient norm in its analysis, and
its figures' "KL+Entropy grad norm" adds two norms (an upper bound of the regularizer's, which
`regularizer` measures).

Cost: per bucket ("all" and each variance bucket, so each row twice), one forward pass and one backward pass
per component for every mini-batch, and one float32 gradient-sized buffer per component held at once. A bucket's
last mini-batch is topped up to `mini_batch_size` rows (one program shape, compiled once per step as the update's).
"""

from __future__ import annotations

import functools
import itertools
import logging
from typing import Any, Mapping

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import nnx

from ragen_jax.diagnostics.buckets import episode_reward_std, variance_buckets
from ragen_jax.algos.settings import AlgoSettings
from ragen_jax.trainer.batch_stats import take_rows
from ragen_jax.trainer.steps import _micro_batches, make_actor_loss

logger = logging.getLogger(__name__)

LOSS_NAMES = {"task": "policy", "entropy": "entropy", "kl": "kl"}  # RAGEN's actor/loss/* name of each component
REQUIRED_KEYS = ("tokens", "attention_mask", "loss_mask", "old_logprobs", "sample_logprobs", "advantages")


def loss_components(algo: AlgoSettings) -> tuple[str, ...]:
    """The parts RAGEN splits for these settings: task, then entropy if entropy_coeff != 0, kl with use_kl_loss."""
    return ("task",) + (("entropy",) if algo.entropy_coeff != 0 else ()) + (("kl",) if algo.use_kl_loss else ())


def split_due(step: int, every: int) -> bool:
    """RAGEN's schedule (trainer.gradient_analysis_every): steps 1, 1 + every, 1 + 2 * every, ... (step counted
    from 1, as TensorBoard shows it); every <= 0 never."""
    return every > 0 and step >= 1 and (step - 1) % every == 0


def _dot(a: Any, b: Any) -> jax.Array:
    return sum(jnp.vdot(x, y) for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b)))


@functools.partial(jax.jit, static_argnames=("graphdef", "algo", "micro_batch_size"))
def component_gradients(graphdef: Any, trainable: Any, frozen: Any, minibatch: Mapping[str, jax.Array],
                        algo: AlgoSettings, micro_batch_size: int) -> dict[str, jax.Array]:
    """One mini-batch's split (module docstring): {c: ||g_c||, "loss/<l>": L_c, "loss/total", "total": ||sum g_c||,
    "regularizer": ||g_entropy + g_kl|| (with a regularizer), "cos/<a>_<b>"}, each [].

    minibatch: [M, ...] arrays as the actor update takes them (tokens, attention_mask, loss_mask, old_logprobs,
    sample_logprobs, advantages; positions, row_valid optional; ref_logprobs with use_kl_loss); M a multiple of
    micro_batch_size."""
    actor = make_actor_loss(algo)
    names = loss_components(algo)
    minibatch, _ = actor.corrected(dict(minibatch))
    denoms = actor.denominators(minibatch, micro_batch_size)

    def body(acc, xs):
        mb, denom = xs

        def parts(params):
            terms, _ = actor.terms(nnx.merge(graphdef, params, frozen), mb, denom)
            return {c: terms[c] for c in names}

        terms, pullback = jax.vjp(parts, trainable)
        for c in names:  # one backward pass per part; the forward pass is shared
            (grad,) = pullback({n: jnp.asarray(n == c, terms[n].dtype) for n in names})
            acc[c] = jax.tree.map(lambda a, g: a + g.astype(jnp.float32), acc[c], grad)
        return acc, terms

    zeros = jax.tree.map(lambda p: jnp.zeros(p.shape, jnp.float32), trainable)
    grads, terms = jax.lax.scan(body, {c: zeros for c in names}, (_micro_batches(minibatch, micro_batch_size),
                                                                  denoms))
    out = {c: optax.global_norm(grads[c]) for c in names}
    losses = {c: terms[c].sum() for c in names}
    out.update({f"loss/{LOSS_NAMES[c]}": v for c, v in losses.items()})
    out["loss/total"] = sum(losses.values())
    out["total"] = optax.global_norm(jax.tree.map(lambda *g: sum(g), *grads.values()))
    regularizers = [grads[c] for c in names if c != "task"]
    if regularizers:
        out["regularizer"] = optax.global_norm(jax.tree.map(lambda *g: sum(g), *regularizers))
    for a, b in itertools.combinations(names, 2):
        scale = out[a] * out[b]
        out[f"cos/{a}_{b}"] = jnp.where(scale > 0, _dot(grads[a], grads[b]) / jnp.where(scale > 0, scale, 1.0), 0.0)
    return out


def _minibatch(batch: Mapping[str, Any], rows: np.ndarray, size: int) -> dict[str, jax.Array]:
    """Rows [n <= size] of the batch as one mini-batch of `size` rows; the extra rows (copies of rows[0]) have no
    loss mask and row_valid 0, so they add nothing (as the update's padding rows: a micro-batch of them counts for
    nothing in the denominators either)."""
    idx = np.concatenate([rows, np.full(size - rows.size, rows[0])]).astype(np.int32)
    keep = (np.arange(size) < rows.size).astype(np.float32)
    mb = take_rows(dict(batch), jnp.asarray(idx))
    mb["loss_mask"] = mb["loss_mask"] * jnp.asarray(keep, mb["loss_mask"].dtype)[:, None]
    mb["row_valid"] = mb["row_valid"] * jnp.asarray(keep)
    return mb


def gradient_split(graphdef: Any, trainable: Any, frozen: Any, batch: Mapping[str, Any], algo: AlgoSettings, *,
                   group_ids: np.ndarray, reward_std: np.ndarray, mini_batch_size: int, micro_batch_size: int,
                   row_valid: np.ndarray | None = None, num_buckets: int = 6, bucket_mode: str = "quantile",
                   prefix: str = "grad_norm", mirror_all: bool = True) -> dict[str, float]:
    """RAGEN-2's gradient analysis of one batch -> metrics under RAGEN's names (module docstring).

    batch: [B, ...] arrays as the update takes them (see `component_gradients`); group_ids [B] and reward_std [B]
    (each row's group and its group's in-group reward std); row_valid [B] (default all): the rows that train.
    prefix "grad_norm" (RAGEN's post-filter batch) or "grad_norm_prefilter"; mirror_all copies the "all"
    bucket's parts to actor/grad_norm/* and actor/loss/* (RAGEN does so for the post-filter batch only).
    Besides the parts, per bucket: sample_count, sample_pct, reward_std_mean (over its groups), reward_std_min /
    _max, group_rv_count."""
    missing = [k for k in REQUIRED_KEYS + (("ref_logprobs",) if algo.use_kl_loss else ()) if k not in batch]
    if missing:
        raise ValueError(f"gradient_split needs the update's arrays; missing {missing} (ref_logprobs: with "
                         "use_kl_loss the reference policy's log-probs of the same tokens).")
    if mini_batch_size % micro_batch_size:
        raise ValueError(f"mini_batch_size ({mini_batch_size}) must be a multiple of micro_batch_size "
                         f"({micro_batch_size}).")
    rows_total = int(np.asarray(batch["tokens"]).shape[0])
    valid = np.ones(rows_total, bool) if row_valid is None else np.asarray(row_valid) > 0
    keys = REQUIRED_KEYS + tuple(k for k in ("positions", "ref_logprobs") if k in batch)
    arrays = {k: jnp.asarray(batch[k]) for k in keys}  # once on the device (a no-op for the trainer's arrays)
    arrays["row_valid"] = jnp.asarray(valid, jnp.float32)
    loss_mask = np.asarray(batch["loss_mask"]) > 0
    reward_std = np.asarray(reward_std, np.float64)
    buckets = variance_buckets(group_ids, reward_std, num_buckets=num_buckets, mode=bucket_mode, valid=valid)
    names = loss_components(algo)
    metrics: dict[str, float] = {}
    for name, bucket in buckets.items():
        parts = [component_gradients(graphdef, trainable, frozen,  # one shape, one compile per step
                                     _minibatch(arrays, bucket.rows[i:i + mini_batch_size], mini_batch_size), algo,
                                     micro_batch_size)
                 for i in range(0, bucket.rows.size, mini_batch_size)]
        split = {k: float(np.mean([float(p[k]) for p in parts])) for k in parts[0]}
        count, tokens = int(bucket.rows.size), int(loss_mask[bucket.rows].sum())
        p = f"{prefix}/{name}"
        metrics.update({f"{p}/sample_count": float(count), f"{p}/sample_pct": count / int(valid.sum()),
                        f"{p}/reward_std_mean": float(bucket.group_std.mean()),
                        f"{p}/reward_std_min": float(reward_std[bucket.rows].min()),
                        f"{p}/reward_std_max": float(reward_std[bucket.rows].max()),
                        f"{p}/group_rv_count": float(bucket.group_ids.size)})
        for c in names:
            metrics[f"{p}/{c}"] = split[c]
            metrics[f"{p}/per_sample/{c}"] = split[c] / count
            if tokens:
                metrics[f"{p}/per_token/{c}"] = split[c] / tokens
        metrics.update({f"{p}/{k}": v for k, v in split.items() if k not in names})
        if mirror_all and name == "all":
            metrics.update({f"actor/grad_norm/{c}": split[c] for c in names})
            metrics.update({f"actor/{k}": v for k, v in split.items() if k.startswith("loss/")})
        logger.info("gradient analysis %s: %d rows, %d groups, reward std %.4f; grad norms %s", p, count,
                    bucket.group_ids.size, bucket.group_std.mean(),
                    " ".join(f"{c}={split[c]:.4g}" for c in names + ("total",)))
    return metrics


def split_training_batch(models: Any, batch: Any, episodes: list, algo: AlgoSettings, *, mini_batch_size: int,
                         micro_batch_size: int, num_buckets: int = 6, bucket_mode: str = "quantile",
                         prefix: str = "grad_norm", mirror_all: bool = True) -> dict[str, float]:
    """The gradient analysis of a step's training batch, where the trainer runs it: after `stages.advantages`,
    before `stages.update` (RAGEN: before the actor update). models: the RLModels (its actor at the parameters
    the update starts from); batch: the TrainingBatch (dev arrays with old / reference log-probs and advantages,
    host group and episode ids, row_valid); episodes: the step's played episodes, whose rewards give each group's
    in-group reward std (RAGEN's bucket signal)."""
    rewards = np.array([ep.total_reward for ep in episodes], np.float64)
    ok = np.array([not ep.error for ep in episodes], bool)
    episode_std = episode_reward_std(rewards, np.array([ep.group_id for ep in episodes]), ok)
    ids = np.asarray(batch.host["episode_ids"])  # padding rows hold negative ids (and row_valid 0)
    reward_std = np.where(batch.row_valid, episode_std[np.clip(ids, 0, len(episodes) - 1)], 0.0)
    actor = models.actor
    return gradient_split(actor.graphdef, actor.trainable, actor.frozen, batch.dev, algo,
                          group_ids=np.asarray(batch.host["group_ids"]), reward_std=reward_std,
                          row_valid=batch.row_valid, mini_batch_size=mini_batch_size,
                          micro_batch_size=micro_batch_size, num_buckets=num_buckets, bucket_mode=bucket_mode,
                          prefix=prefix, mirror_all=mirror_all)
