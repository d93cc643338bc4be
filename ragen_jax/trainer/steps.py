"""The update stage as pure jitted functions over split model state.

`make_step_fns(...)` closes over the static pieces (graph definitions, optimizers, algorithm
settings) and returns jitted functions of (params, batch): scoring (log-probs, values),
advantages, and one actor / critic update per mini-batch with exact micro-batch gradient
accumulation (a `lax.scan` over micro-batches; loss numerators add, the mini-batch denominator
divides once). Params and optimizer states are donated. A non-finite gradient skips the update.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable

import chex
import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from ragen_jax.algos import (AdvantageInputs, agg_denominator, agg_numerator, call_with_supported,
                             compute_advantages, kl_penalty, token_logprobs_and_entropy,
                             turn_ends_from_mask, turn_ends_from_rewards)
from ragen_jax.algos.registry import POLICY_LOSSES, VALUE_LOSSES
from ragen_jax.algos.rollout_correction import resolve_rollout_correction
from ragen_jax import sharding
from ragen_jax.models.rope import positions_from_mask
from ragen_jax.algos.policy_loss import (ALL_ROWS_ATTR, ROLLOUT_WEIGHTS_KEY, policy_loss_denominator,
                                         required_agg_mode_problem, takes_rollout_weights)
from ragen_jax.algos.settings import AlgoSettings, advantage_hparams, policy_loss_hparams, value_loss_hparams
from ragen_jax.algos.shaping import shape_advantages
from ragen_jax.optim import guarded_apply
from ragen_jax.trainer.vision_scoring import IMAGE_KEYS, vl_row_logprobs


def _shift_right(x: jax.Array) -> jax.Array:
    """[B, T-1] values for tokens 1..T-1 -> token-aligned [B, T] with 0 at t=0."""
    return jnp.pad(x, ((0, 0), (1, 0)))


def scored_positions(loss_mask: np.ndarray, multiple: int = 32) -> np.ndarray:
    """Host-side: the positions each row trains, [B, K] int32 (K a multiple of `multiple`), padded with T.

    Log-probs are needed only where the loss mask is on (a RAGEN row is mostly prompt), so scoring and the
    update apply the vocabulary projection at these positions only."""
    mask = np.asarray(loss_mask) > 0
    b, t = mask.shape
    counts = mask.sum(axis=1)
    k = max(multiple, -(-int(counts.max(initial=0)) // multiple) * multiple)
    out = np.full((b, k), t, np.int32)
    rows, cols = np.nonzero(mask)
    out[rows, np.arange(len(rows)) - np.repeat(np.cumsum(counts) - counts, counts)] = cols
    return out


def policy_logprobs(model, tokens: jax.Array, attention_mask: jax.Array, *, temperature: float = 1.0,
                    chunk_size: int = 256, positions: jax.Array | None = None) -> tuple[jax.Array, jax.Array]:
    """Token-aligned log p(tokens[t] | tokens[<t]) and entropy, [B, T] each (0 at t=0).

    positions [B, K] (optional, from `scored_positions`; entries >= T are padding): compute them only there and
    leave 0 elsewhere (the same values where computed, a fraction of the vocabulary work; the model's last layer
    runs its attention and MLP for those positions only: `hidden(..., hidden_at=)`)."""
    chex.assert_rank([tokens, attention_mask], 2)
    head = model.lm_head_matrix()
    if positions is None:
        hidden, _ = model.hidden(tokens, positions_from_mask(attention_mask), attention_mask=attention_mask)
        lp, ent = token_logprobs_and_entropy(hidden[:, :-1], head, tokens[:, 1:], chunk_size=chunk_size,
                                             temperature=temperature)
        return _shift_right(lp), _shift_right(ent)
    chex.assert_rank(positions, 2)
    b, t = tokens.shape
    at = jnp.clip(positions, 1, t - 1)  # token t is predicted from the hidden state at t - 1
    h, _ = model.hidden(tokens, positions_from_mask(attention_mask), attention_mask=attention_mask, hidden_at=at - 1)
    lp, ent = token_logprobs_and_entropy(h, head, jnp.take_along_axis(tokens, at, axis=1), chunk_size=chunk_size,
                                         temperature=temperature)
    rows = jnp.arange(b)[:, None]
    scatter = lambda x: jnp.zeros((b, t), x.dtype).at[rows, positions].set(x, mode="drop")  # noqa: E731
    return scatter(lp), scatter(ent)


def critic_values(critic, tokens: jax.Array, attention_mask: jax.Array) -> jax.Array:
    """Token-aligned values [B, T]: the value of the state before token t (V(h_{t-1})), 0 at t=0."""
    values = critic(tokens, positions_from_mask(attention_mask), attention_mask=attention_mask)
    return _shift_right(values[:, :-1])


def _micro_batches(batch: dict[str, jax.Array], micro: int) -> dict[str, jax.Array]:
    """Leaves [M, ...] -> [M // micro, micro, ...] for a scan over micro-batches.

    Under a mesh each micro-batch's rows are split over (data, fsdp): the mini-batch's rows arrive in contiguous
    blocks per device, so micro-batch i would live on a few devices only, and every scan step would move its rows
    (collective-permutes, all-gathers); laid out this way they move once, before the scan."""
    def split(x):
        if x.shape[0] % micro:
            raise ValueError(f"Mini-batch of {x.shape[0]} rows is not a multiple of micro_batch_size {micro}.")
        return sharding.constrain_rows(x.reshape(x.shape[0] // micro, micro, *x.shape[1:]), row_dim=1)
    return jax.tree.map(split, batch)


def micro_batches_counted(mask: jax.Array, row_valid: jax.Array, micro: int, all_rows: bool = False) -> jax.Array:
    """How many micro-batches of mask [M, T] (row_valid [M]) a "micro_batch"-scope loss averages over, at least 1:
    those with tokens to train or, with all_rows (a loss whose mean counts every row: geo_mean), those with a real
    row, empty rows or not, as veRL's 1 / gradient_accumulation counts every micro-batch."""
    n_micro = mask.shape[0] // micro
    has = row_valid.reshape(n_micro, -1) > 0 if all_rows else mask.reshape(n_micro, -1).astype(bool)
    return jnp.maximum(jnp.sum(has.any(axis=-1)), 1).astype(jnp.float32)


def loss_denominators(mask: jax.Array, mode: str, scope: str, micro: int,
                      loss_scale_factor: int | None = None, denominator: Callable | None = None,
                      row_valid: jax.Array | None = None, all_rows: bool = False) -> jax.Array:
    """What each micro-batch's aggregated numerator is divided by. mask [M, T] -> [M // micro].

    scope "mini_batch": the mini-batch's own denominator for every micro-batch, so the summed losses are the
    mini-batch's loss whatever the split (exact accumulation). "micro_batch": each micro-batch aggregated over its
    own rows, then averaged over the micro-batches with something to train (veRL 0.4, which RAGEN runs: with one
    row per micro-batch its token-mean weighs every sequence alike). A micro-batch of empty rows (the all-zero
    rows padding a filtered batch; RAGEN pads with copies of real rows instead) adds nothing and counts for
    nothing, so padding does not shrink the last mini-batch's loss; with ``all_rows`` (geo_mean, whose mean counts
    empty rows) a micro-batch of real empty rows counts, as in veRL (`micro_batches_counted`).
    ``loss_scale_factor`` is the constant horizon of ``seq-mean-token-sum-norm`` (None: the padded width).
    ``denominator(mask [m, T], row_valid [m])`` replaces the aggregation's (the policy loss's own,
    `policy_loss_denominator`); row_valid [M] marks the real rows (None: all)."""
    n_micro = mask.shape[0] // micro
    row_valid = jnp.ones(mask.shape[:1], jnp.float32) if row_valid is None else row_valid
    if denominator is None:
        def denominator(m, _rows):
            return agg_denominator(m, mode, loss_scale_factor)
    if scope == "mini_batch":
        return jnp.full((n_micro,), jnp.maximum(denominator(mask, row_valid), 1e-8))
    if scope != "micro_batch":
        raise ValueError(f"loss_scope must be 'mini_batch' or 'micro_batch', got {scope!r}.")
    parts = mask.reshape(n_micro, micro, *mask.shape[1:])
    counted = micro_batches_counted(mask, row_valid, micro, all_rows)
    return jnp.maximum(jax.vmap(denominator)(parts, row_valid.reshape(n_micro, micro)), 1e-8) * counted


def _accumulate(loss_fn, params, micro_batches, denominators, *args):
    """Sum of value_and_grad over micro-batches (scan), micro-batch i's loss divided by denominators[i].
    -> (loss sum, grads sum, metrics of each micro-batch [n_micro]).

    Gradients accumulate in float32 whatever the parameters' dtype (bfloat16 sums drift)."""
    def body(carry, xs):
        mb, denom = xs
        loss_sum, grads_sum = carry
        (loss, metrics), grads = jax.value_and_grad(loss_fn, has_aux=True)(params, mb, *args, denom)
        return (loss_sum + loss, jax.tree.map(lambda a, g: a + g.astype(jnp.float32), grads_sum, grads)), metrics
    zeros = jax.tree.map(lambda p: jnp.zeros(p.shape, jnp.float32), params)
    (loss, grads), metrics = jax.lax.scan(body, (jnp.zeros((), jnp.float32), zeros), (micro_batches, denominators))
    return loss, grads, metrics


def reduce_micro_metrics(metrics: dict[str, jax.Array], mask: jax.Array, micro: int,
                         summed: tuple[str, ...] = ()) -> dict[str, jax.Array]:
    """Per-micro-batch metrics [n_micro] -> scalars: the keys in `summed` (parts of the loss) added up, the others
    (clip fractions, ppo_kl, ...) averaged over the micro-batches with tokens to train in mask [M, T]; a
    micro-batch of padding rows has no clip fraction, and its 0 would pull the mean down. Their number is
    `micro_batches_trained`, the weight `mean_update_metrics` gives this mini-batch's averages."""
    n_micro = mask.shape[0] // micro
    trained = mask.reshape(n_micro, -1).astype(bool).any(axis=-1).astype(jnp.float32)
    weights = trained / jnp.maximum(trained.sum(), 1.0)
    per_micro = {k: jnp.reshape(v, (n_micro, -1)).mean(axis=-1) for k, v in metrics.items()}  # a custom loss's
    out = {k: v.sum() if k in summed else jnp.sum(v * weights) for k, v in per_micro.items()}  # may be arrays
    return dict(out, **{MICRO_BATCHES_TRAINED: trained.sum()})


MICRO_BATCHES_TRAINED = "micro_batches_trained"
# what an update computes once over its mini-batch; its other metrics are averages over micro-batches
MINI_BATCH_METRICS = ("loss", "vf_loss", "grad_norm", "update_skipped", "pg_loss", "entropy_loss", "kl_loss")


def mean_update_metrics(updates: list[dict[str, Any]]) -> dict[str, float]:
    """One RL step's metrics from its updates' (one dict per mini-batch and epoch), as veRL's reduce_metrics of
    its append_to_dict lists: the mini-batch values (MINI_BATCH_METRICS, rollout correction) averaged over the
    updates, the micro-batch averages (clip fractions, ppo_kl, ...) over all micro-batches with tokens (one flat
    mean: a mini-batch that padding rows fill counts for its real micro-batches only); `updates_skipped` the
    number of updates that did not apply."""
    if not updates:
        return {}
    counts = np.array([float(u.get(MICRO_BATCHES_TRAINED, 1.0)) for u in updates])
    out = {}
    for k in updates[0]:
        if k == MICRO_BATCHES_TRAINED:
            continue
        values = np.array([float(np.mean(np.asarray(u[k]))) for u in updates])
        per_mini = k in MINI_BATCH_METRICS or k.startswith("rollout_corr_") or counts.sum() == 0
        out[k] = float(values.mean() if per_mini else (values * counts).sum() / counts.sum())
    out["updates_skipped"] = float(sum(float(u["update_skipped"]) for u in updates))
    return out


@dataclasses.dataclass(frozen=True)
class ActorLoss:
    """The update's actor loss for one AlgoSettings, in pieces a diagnostic can reuse one term at a time
    (diagnostics/gradients.py differentiates each term of `terms` alone).

    corrected(minibatch) -> (minibatch, metrics): the rollout correction, once per mini-batch before the
        micro-batch split (dropped tokens leave the loss mask, weights scale the policy loss).
    denominators(minibatch, micro) -> {"agg": [n_micro], "policy": [n_micro]}: what each micro-batch's
        aggregated numerators are divided by (`loss_denominators`; "policy" with the policy loss's own).
    terms(model, mb, denom) -> (terms, metrics): one micro-batch's loss terms, each already signed and weighted
        as it enters the loss: {"task": policy loss, "entropy": -entropy_coeff * entropy, "kl": kl_loss_coef *
        KL (only with use_kl_loss)}; their sum (`total_actor_loss`) is the loss the update differentiates.
    """

    terms: Callable
    corrected: Callable
    denominators: Callable


def total_actor_loss(terms: dict[str, jax.Array]) -> jax.Array:
    """The actor loss from `ActorLoss.terms`: task + entropy (+ kl), in that order."""
    total = terms["task"] + terms["entropy"]
    return total + terms["kl"] if "kl" in terms else total


def make_actor_loss(algo: AlgoSettings) -> ActorLoss:
    """The actor loss of `algo` (checked now: the policy loss's aggregation mode and the rollout correction)."""
    policy_fn = POLICY_LOSSES.get(algo.policy_loss)
    agg_problem = required_agg_mode_problem(policy_fn, algo.loss_agg_mode, algo.policy_loss)
    if agg_problem:
        raise ValueError(agg_problem)
    correct = resolve_rollout_correction(algo.rollout_correction, algo.rollout_correction_bound,
                                         policy_loss=policy_fn, tis_cap=algo.tis_cap)
    weighs_itself = takes_rollout_weights(policy_fn)

    def pg_denominator(mask, row_valid):
        return policy_loss_denominator(policy_fn, mask, algo.loss_agg_mode, row_valid, algo.loss_scale_factor)

    def terms(model, mb, denom):
        if IMAGE_KEYS[0] in mb:  # a vision-language policy's rows: the tower runs inside the loss
            logprobs, entropy = vl_row_logprobs(model, mb["tokens"], mb["attention_mask"],
                                                {k: mb[k] for k in IMAGE_KEYS}, temperature=algo.temperature,
                                                chunk_size=algo.logprob_chunk)
        else:
            logprobs, entropy = policy_logprobs(model, mb["tokens"], mb["attention_mask"],
                                                temperature=algo.temperature, chunk_size=algo.logprob_chunk,
                                                positions=mb.get("positions"))
        mask = mb["loss_mask"]
        weights = {ROLLOUT_WEIGHTS_KEY: mb["rollout_weights"]} if weighs_itself else {}
        pg, metrics = call_with_supported(policy_fn, logprobs, mb["old_logprobs"], mb["advantages"], mask,
                                          sampler_logprobs=mb["sample_logprobs"], **weights,
                                          **policy_loss_hparams(algo, policy_fn))
        pg_loss = agg_numerator(pg if weighs_itself else pg * mb["rollout_weights"], mask, algo.loss_agg_mode)
        pg_loss = pg_loss / denom["policy"]
        ent_num = agg_numerator(entropy, mask, algo.loss_agg_mode)
        out = {"task": pg_loss, "entropy": -(algo.entropy_coeff * ent_num / denom["agg"])}
        metrics = dict(metrics, pg_loss=pg_loss, entropy_loss=ent_num / denom["agg"])  # RAGEN's in-update name
        if algo.use_kl_loss:
            kl_num = agg_numerator(kl_penalty(logprobs, mb["ref_logprobs"], algo.kl_loss_type), mask,
                                   algo.loss_agg_mode)
            out["kl"] = algo.kl_loss_coef * kl_num / denom["agg"]
            metrics["kl_loss"] = kl_num / denom["agg"]
        return out, metrics

    def corrected(minibatch):
        mask = minibatch["loss_mask"]
        weights, keep, metrics = correct(minibatch["old_logprobs"], minibatch["sample_logprobs"], mask)
        return dict(minibatch, loss_mask=mask * keep.astype(mask.dtype), rollout_weights=weights), metrics

    def denominators(minibatch, micro):
        mask, row_valid = minibatch["loss_mask"], minibatch.get("row_valid")
        return {"agg": loss_denominators(mask, algo.loss_agg_mode, algo.loss_scope, micro, algo.loss_scale_factor),
                "policy": loss_denominators(mask, algo.loss_agg_mode, algo.loss_scope, micro, algo.loss_scale_factor,
                                            pg_denominator, row_valid, getattr(policy_fn, ALL_ROWS_ATTR, False))}

    return ActorLoss(terms=terms, corrected=corrected, denominators=denominators)


def make_step_fns(actor_graphdef, critic_graphdef, algo: AlgoSettings, actor_tx, critic_tx,
                  micro_batch_size: int) -> dict[str, Callable]:
    """Jitted scoring / advantage / update functions for one training run."""

    def actor_model(trainable, frozen):
        return nnx.merge(actor_graphdef, trainable, frozen)

    @jax.jit
    def score_policy(trainable, frozen, tokens, attention_mask, positions=None, images=None):
        if images is not None:  # a vision-language policy's rows (`vision_scoring.IMAGE_KEYS`)
            return vl_row_logprobs(actor_model(trainable, frozen), tokens, attention_mask, images,
                                   temperature=algo.temperature, chunk_size=algo.logprob_chunk)
        return policy_logprobs(actor_model(trainable, frozen), tokens, attention_mask,
                               temperature=algo.temperature, chunk_size=algo.logprob_chunk, positions=positions)

    @jax.jit
    def score_values(critic_params, critic_frozen, tokens, attention_mask):
        return critic_values(nnx.merge(critic_graphdef, critic_params, critic_frozen), tokens, attention_mask)

    @jax.jit
    def advantages(token_rewards, loss_mask, values, group_ids, episode_ids=None):
        turn_ends = (turn_ends_from_mask(loss_mask) if algo.bi_level_turn_ends == "turn"
                     else turn_ends_from_rewards(token_rewards) & (loss_mask > 0))
        inputs = AdvantageInputs(token_level_rewards=token_rewards, response_mask=loss_mask,
                                 values=values, group_ids=group_ids, episode_ids=episode_ids,
                                 turn_end_mask=turn_ends)
        adv, returns = compute_advantages(algo.adv_estimator, inputs, **advantage_hparams(algo))
        adv = shape_advantages(adv, loss_mask, token_rewards.astype(jnp.float32).sum(axis=-1), group_ids, episode_ids,
                               soft_reweight=algo.soft_advantage_reweight and algo.adv_estimator == "grpo",
                               length_weight=algo.grpo_advantage_length_weight and algo.adv_estimator == "grpo",
                               zero=algo.zero_task_advantage)
        return adv, returns

    actor = make_actor_loss(algo)

    def actor_loss(trainable, mb, frozen, denom):
        terms, metrics = actor.terms(actor_model(trainable, frozen), mb, denom)
        return total_actor_loss(terms), metrics

    def _actor_update(trainable, opt_state, frozen, minibatch, lr=None):
        minibatch, correction_metrics = actor.corrected(minibatch)
        denoms = actor.denominators(minibatch, micro_batch_size)
        loss, grads, metrics = _accumulate(actor_loss, trainable, _micro_batches(minibatch, micro_batch_size),
                                           denoms, frozen)
        trainable, opt_state, grad_norm, finite = guarded_apply(actor_tx, trainable, opt_state, grads, loss, lr)
        metrics = reduce_micro_metrics(metrics, minibatch["loss_mask"], micro_batch_size,
                                       summed=("pg_loss", "entropy_loss", "kl_loss"))  # per-micro parts of one loss
        metrics.update(correction_metrics, loss=loss, grad_norm=grad_norm,
                       update_skipped=1.0 - finite.astype(jnp.float32))
        return trainable, opt_state, metrics

    def critic_loss(params, mb, frozen, denom):
        values = critic_values(nnx.merge(critic_graphdef, params, frozen), mb["tokens"], mb["attention_mask"])
        vf, metrics = call_with_supported(VALUE_LOSSES.get(algo.value_loss), values, mb["values"], mb["returns"],
                                          mb["loss_mask"], **value_loss_hparams(algo))
        num = agg_numerator(vf, mb["loss_mask"], algo.critic_loss_agg_mode)
        return num / denom, metrics

    def _critic_update(params, opt_state, frozen, minibatch, lr=None):
        denoms = loss_denominators(minibatch["loss_mask"], algo.critic_loss_agg_mode, algo.loss_scope,
                                   micro_batch_size, algo.loss_scale_factor)
        loss, grads, metrics = _accumulate(critic_loss, params, _micro_batches(minibatch, micro_batch_size),
                                           denoms, frozen)
        params, opt_state, grad_norm, finite = guarded_apply(critic_tx, params, opt_state, grads, loss, lr)
        metrics = reduce_micro_metrics(metrics, minibatch["loss_mask"], micro_batch_size)
        return params, opt_state, dict(metrics, vf_loss=loss, grad_norm=grad_norm,
                                       update_skipped=1.0 - finite.astype(jnp.float32))

    actor_update = StateKeepingJit(_actor_update)
    critic_update = StateKeepingJit(_critic_update)
    return dict(score_policy=score_policy, score_values=score_values, advantages=advantages,
                actor_update=actor_update, critic_update=critic_update)


class StateKeepingJit:
    """jax.jit of an update `fn(params, opt_state, ...) -> (params, opt_state, metrics)` whose new params and optimizer
    state keep their inputs' shardings (both donated). Without out_shardings XLA:GPU returned an fsdp-sharded update's
    params and Adam state whole on every device (a deviceless 8-GPU compile, experiments/bench/gpu_aot.py); XLA:CPU kept
    them sharded. One jit per layout of the inputs; `lower` is jax.jit's, for ahead-of-time compiles."""

    def __init__(self, fn: Callable):
        self.fn = fn
        self._jits: dict = {}

    def _jit(self, params: Any, opt_state: Any):
        shardings = jax.tree.map(lambda x: getattr(x, "sharding", None), (params, opt_state))
        leaves = jax.tree.leaves(shardings, is_leaf=lambda x: x is None)
        key = (jax.tree.structure((params, opt_state)), tuple(leaves))
        if key not in self._jits:
            known = all(leaf is not None for leaf in leaves)
            out = (*shardings, None) if known else None
            self._jits[key] = jax.jit(self.fn, donate_argnums=(0, 1), out_shardings=out)
        return self._jits[key]

    def __call__(self, params, opt_state, *args):
        return self._jit(params, opt_state)(params, opt_state, *args)

    def lower(self, params, opt_state, *args, **kwargs):
        return self._jit(params, opt_state).lower(params, opt_state, *args, **kwargs)

    def trace(self, params, opt_state, *args, **kwargs):
        return self._jit(params, opt_state).trace(params, opt_state, *args, **kwargs)
