"""The jitted update steps of make_step_fns: the NaN/inf guard, exact micro-batch accumulation for every
aggregation mode (actor and critic), and a custom loss chosen by import path really being the loss."""

import dataclasses
import math

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from flax import nnx

from configs.base import apply_tiny, get_base_config
from ragen_jax.algos import ppo_clip_loss
from ragen_jax.algos.settings import AlgoSettings
from ragen_jax.config import validate_config
from ragen_jax.optim import all_finite, guarded_apply
from ragen_jax.trainer.steps import make_step_fns, mean_update_metrics, scored_positions
from test_algos_step_integration import BASE, ROWS, TX, make_batch, split_actor

AGG_MODES = ["token-mean", "seq-mean-token-mean", "seq-mean-token-sum", "seq-mean-token-sum-norm"]
# weight deltas (new - before) of two code paths: 2.5 float32 ulps of a weight of 1.0 (a norm scale), through
# which each delta is rounded
DELTA_ATOL = 3e-7


def host(tree):
    return [np.array(x) for x in jax.tree.leaves(tree)]


def actor_update(algo, batch, tx=TX, micro=ROWS):
    """One actor update from the fixed initial model -> (params before, opt before, params after, opt after,
    metrics), all on the host (the update donates its inputs)."""
    graphdef, trainable, frozen = split_actor()
    opt = tx.init(trainable)
    before, opt_before = host(trainable), host(opt)
    fns = make_step_fns(graphdef, None, algo, tx, None, micro)
    new, new_opt, metrics = fns["actor_update"](trainable, opt, frozen, {k: jnp.asarray(v) for k, v in batch.items()})
    return before, opt_before, host(new), host(new_opt), {k: float(v) for k, v in metrics.items()}


def _nan_advantages(batch):
    return dict(batch, advantages=np.where(batch["loss_mask"] > 0, np.nan, 0.0).astype(np.float32))


def _inf_loss(batch):  # one token with an infinite advantage: the loss is -inf, every other value fine
    adv = batch["advantages"].copy()
    adv[0, 5] = np.inf
    return dict(batch, advantages=adv)


def _state_overflows() -> optax.GradientTransformation:
    """Finite updates, but a new optimizer state that is infinite."""
    def update(updates, state, params=None):
        return jax.tree.map(lambda u: -1e-3 * u, updates), jax.tree.map(lambda a: a + jnp.inf, state)
    return optax.GradientTransformation(lambda params: jax.tree.map(jnp.zeros_like, params), update)


@pytest.mark.parametrize("poison,tx", [
    (_nan_advantages, TX),
    (_inf_loss, TX),
    (lambda b: b, optax.sgd(1e39)),  # finite loss and gradient, but the new weights overflow to inf
    (lambda b: b, _state_overflows()),  # finite loss, gradient and weights; the new optimizer state is not
    (lambda b: b, optax.adam(1e39)),  # the same through an optimizer with state
])
@pytest.mark.slow  # default run: too long for CI's 15 minutes on 2 cores
def test_a_poisoned_update_changes_nothing_and_is_counted(poison, tx):
    algo = dataclasses.replace(BASE, policy_loss="vanilla", use_kl_loss=False)
    before, opt_before, after, opt_after, metrics = actor_update(algo, poison(make_batch()), tx)
    assert metrics["update_skipped"] == 1.0
    assert all(np.array_equal(a, b) for a, b in zip(before, after))  # bit for bit
    assert all(np.array_equal(a, b) for a, b in zip(opt_before, opt_after))
    healthy = actor_update(algo, make_batch(), optax.sgd(1.0))
    assert healthy[-1]["update_skipped"] == 0.0 and not np.array_equal(healthy[0][0], healthy[2][0])


@pytest.mark.slow  # default run: too long for CI's 15 minutes on 2 cores
def test_a_poisoned_critic_update_changes_nothing():
    from ragen_jax.models import ValueModel
    from ragen_jax.models.tiny import make_tiny_model

    policy, _ = make_tiny_model(seed=0, hidden_size=32, num_layers=1, num_heads=2, num_kv_heads=1,
                                intermediate_size=64)
    critic = ValueModel.from_causal_lm(policy, rngs=nnx.Rngs(1))
    graphdef, params, frozen = nnx.split(critic, nnx.Param, ...)
    tx = optax.adam(1e-3)
    opt = tx.init(params)
    batch = make_batch()
    batch = {"tokens": batch["tokens"], "attention_mask": batch["attention_mask"], "loss_mask": batch["loss_mask"],
             "values": np.zeros_like(batch["loss_mask"]),
             "returns": np.where(batch["loss_mask"] > 0, np.inf, 0.0).astype(np.float32)}
    before, opt_before = host(params), host(opt)
    fns = make_step_fns(graphdef, graphdef, BASE, tx, tx, ROWS)
    new, new_opt, metrics = fns["critic_update"](params, opt, frozen, {k: jnp.asarray(v) for k, v in batch.items()})
    assert float(metrics["update_skipped"]) == 1.0
    assert all(np.array_equal(a, b) for a, b in zip(before, host(new)))
    assert all(np.array_equal(a, b) for a, b in zip(opt_before, host(new_opt)))


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
@pytest.mark.parametrize("dtype", [jnp.float32, jnp.bfloat16])
def test_all_finite_finds_one_bad_value_in_any_leaf_and_never_overflows(bad, dtype):
    big = jnp.full((64, 64), 3e38, dtype)  # finite; a plain sum of these is inf
    leaves = {"a": big, "b": jnp.zeros((3,), dtype), "c": -big}
    steps = jnp.arange(5)  # an integer leaf: always finite
    assert bool(jax.jit(all_finite)((leaves, steps)))
    for name, x in leaves.items():
        poisoned = dict(leaves, **{name: x.at[(0,) * x.ndim].set(bad)})
        assert not bool(jax.jit(all_finite)((poisoned, steps))), name


def test_the_guard_costs_at_most_two_kernels_per_state_leaf():
    """The guard around the optimizer compiles to few kernels: one reduction per leaf (XLA:CPU keeps the x * 0
    apart from some of them) and one conditional for the pick. The tiny model with AdamW: 295 fusions against
    the bare step's 151 for 80 leaves; an isfinite, an all-reduce and a select per leaf made 525, ~1.4 s more
    compile time of the tiny model's update."""
    from ragen_jax.models.tiny import make_tiny_model
    from ragen_jax.optim import make_optimizer

    trainable = nnx.state(make_tiny_model(seed=0)[0], nnx.Param)
    tx, _ = make_optimizer(dict(lr=1e-3, weight_decay=0.01, b1=0.9, b2=0.999, eps=1e-8, warmup_steps=0,
                                schedule="constant", grad_clip=1.0), 10)
    opt = tx.init(trainable)
    grads = jax.tree.map(jnp.ones_like, trainable)

    def plain(p, o, g):
        updates, new_opt = tx.update(g, o, p)
        return optax.apply_updates(p, updates), new_opt

    def guarded(p, o, g):
        return guarded_apply(tx, p, o, g, jnp.float32(1.0))[:2]

    def fusions(fn):
        return jax.jit(fn).lower(trainable, opt, grads).compile().as_text().count(" fusion(")

    leaves = len(jax.tree.leaves((trainable, opt)))
    assert fusions(guarded) <= fusions(plain) + 2 * leaves + 8


@pytest.mark.slow  # default run: too long for CI's 15 minutes on 2 cores
@pytest.mark.parametrize("mode", AGG_MODES)
def test_micro_batches_give_the_mini_batch_update_for_every_aggregation(mode):
    """PPO with entropy bonus and a KL term: micro-batches of 2 rows give the update of one 8-row pass."""
    batch = make_batch()
    batch["ref_logprobs"] = batch["old_logprobs"] - 0.05 * batch["loss_mask"]
    algo = dataclasses.replace(BASE, policy_loss="vanilla", loss_agg_mode=mode, use_kl_loss=True, kl_loss_coef=0.3,
                               kl_loss_type="low_var_kl", entropy_coeff=0.02)
    *_, full, _, full_metrics = actor_update(algo, batch, micro=ROWS)
    before, _, split, _, split_metrics = actor_update(algo, batch, micro=2)
    delta_full = np.concatenate([(a - b).ravel() for a, b in zip(full, before)])
    delta_split = np.concatenate([(a - b).ravel() for a, b in zip(split, before)])
    np.testing.assert_allclose(delta_split, delta_full, rtol=1e-4, atol=DELTA_ATOL)
    assert np.abs(delta_full).max() > 1e-3
    for key in ("loss", "pg_loss", "kl_loss", "entropy_loss"):
        np.testing.assert_allclose(split_metrics[key], full_metrics[key], rtol=1e-5, atol=1e-6)


def doubled_vanilla(logprobs, old_logprobs, advantages, response_mask, **kwargs):
    """A custom policy loss reached by import path: twice the built-in vanilla PPO loss."""
    loss, metrics = ppo_clip_loss(logprobs, old_logprobs, advantages, response_mask, **kwargs)
    return 2.0 * loss, metrics


def test_a_custom_loss_by_import_path_is_the_loss_the_update_uses():
    cfg = get_base_config()
    apply_tiny(cfg)
    cfg.algo.update(policy_loss="vanilla", entropy_coeff=0.0, use_kl_loss=False, clip_ratio_c=0.0)
    builtin = dataclasses.replace(AlgoSettings.of(validate_config(cfg)), logprob_chunk=4)
    cfg.algo.custom_policy_loss = "test_trainer_steps:doubled_vanilla"
    custom = dataclasses.replace(AlgoSettings.of(validate_config(cfg)), logprob_chunk=4)
    assert custom.policy_loss == "test_trainer_steps:doubled_vanilla"
    batch = make_batch()
    before, _, plain, _, plain_metrics = actor_update(builtin, batch, tx=optax.sgd(1.0))
    _, _, doubled, _, doubled_metrics = actor_update(custom, batch, tx=optax.sgd(1.0))
    for b, p, d in zip(before, plain, doubled):  # SGD: twice the loss, twice the step
        np.testing.assert_allclose(d - b, 2.0 * (p - b), rtol=1e-5, atol=1e-6)  # atol: float32 ulps of the weights
    assert abs(plain_metrics["pg_loss"]) > 1e-4
    np.testing.assert_allclose(doubled_metrics["pg_loss"], 2.0 * plain_metrics["pg_loss"], rtol=1e-5, atol=1e-6)


def test_scored_positions_lists_each_rows_trained_positions():
    mask = np.array([[0, 1, 1, 0, 1], [0, 0, 0, 0, 0], [1, 1, 1, 1, 1]], np.float32)
    pos = scored_positions(mask, multiple=4)
    np.testing.assert_array_equal(pos, [[1, 2, 4, 5, 5, 5, 5, 5], [5] * 8, [0, 1, 2, 3, 4, 5, 5, 5]])


@pytest.mark.slow  # default run: too long for CI's 15 minutes on 2 cores
@pytest.mark.parametrize("mode", ["token-mean", "seq-mean-token-sum"])
def test_scoring_only_the_trained_positions_changes_nothing(mode):
    """Log-probs, entropy and the update computed at the trained positions only equal the full computation."""
    batch = make_batch()
    batch["ref_logprobs"] = batch["old_logprobs"] - 0.05 * batch["loss_mask"]
    algo = dataclasses.replace(BASE, policy_loss="vanilla", loss_agg_mode=mode, use_kl_loss=True, kl_loss_coef=0.3,
                               kl_loss_type="low_var_kl", entropy_coeff=0.02)
    graphdef, trainable, frozen = split_actor()
    score = make_step_fns(graphdef, None, algo, TX, None, ROWS)["score_policy"]
    positions = scored_positions(batch["loss_mask"], multiple=8)
    full_lp, full_ent = (np.asarray(x) for x in score(trainable, frozen, batch["tokens"], batch["attention_mask"]))
    lp, ent = (np.asarray(x) for x in score(trainable, frozen, batch["tokens"], batch["attention_mask"], positions))
    on = batch["loss_mask"] > 0
    np.testing.assert_allclose(lp[on], full_lp[on], rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(ent[on], full_ent[on], rtol=1e-6, atol=1e-6)
    assert not lp[~on].any() and not ent[~on].any()  # nothing computed off the loss mask
    before, _, full, _, full_metrics = actor_update(algo, batch, micro=2)
    _, _, part, _, part_metrics = actor_update(algo, dict(batch, positions=positions), micro=2)
    for a, b in zip(full, part):
        np.testing.assert_allclose(b, a, rtol=1e-5, atol=DELTA_ATOL)
    for key in ("loss", "pg_loss", "kl_loss", "entropy_loss", "grad_norm"):
        np.testing.assert_allclose(part_metrics[key], full_metrics[key], rtol=1e-5, atol=1e-6)


@pytest.mark.slow  # default run: too long for CI's 15 minutes on 2 cores
def test_micro_batch_scope_averages_each_micro_batchs_own_loss():
    """loss_scope="micro_batch" (veRL 0.4, RAGEN): every micro-batch aggregated over its own rows, the mean over
    micro-batches; with one row per micro-batch token-mean is then seq-mean-token-mean."""
    batch = make_batch()
    batch["ref_logprobs"] = batch["old_logprobs"] - 0.05 * batch["loss_mask"]
    algo = dataclasses.replace(BASE, policy_loss="vanilla", loss_agg_mode="token-mean", use_kl_loss=True,
                               kl_loss_coef=0.3, kl_loss_type="low_var_kl", entropy_coeff=0.02)
    micro_scope = dataclasses.replace(algo, loss_scope="micro_batch")
    before, _, per_row, _, per_row_metrics = actor_update(micro_scope, batch, micro=1)
    *_, seq_mean, _, seq_mean_metrics = actor_update(
        dataclasses.replace(algo, loss_agg_mode="seq-mean-token-mean"), batch)
    for a, b in zip(per_row, seq_mean):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=DELTA_ATOL)
    for key in ("loss", "pg_loss", "kl_loss", "entropy_loss"):
        np.testing.assert_allclose(per_row_metrics[key], seq_mean_metrics[key], rtol=1e-5, atol=1e-6)
    # micro-batches of 2 rows: the mean of the 4 updates each 2-row slice would make alone (SGD is linear)
    *_, pairs, _, pairs_metrics = actor_update(micro_scope, batch, micro=2)
    alone = [actor_update(algo, {k: v[i:i + 2] for k, v in batch.items()}, micro=2) for i in range(0, ROWS, 2)]
    for j, (a, b) in enumerate(zip(pairs, before)):
        expected = np.mean([run[2][j] - b for run in alone], axis=0)
        np.testing.assert_allclose(a - b, expected, rtol=1e-4, atol=DELTA_ATOL)
    np.testing.assert_allclose(pairs_metrics["loss"], np.mean([run[-1]["loss"] for run in alone]), rtol=1e-5, atol=1e-6)
    *_, exact, _, _ = actor_update(algo, batch, micro=2)  # the default scope differs: it weighs every token alike
    assert max(np.abs(a - b).max() for a, b in zip(pairs, exact)) > 1e-4


def _zero_rows(batch: dict, n: int) -> dict:
    """The batch followed by n all-zero rows, as the trainer pads a filtered batch to whole mini-batches."""
    return {k: np.concatenate([v, np.zeros((n, *v.shape[1:]), v.dtype)]) for k, v in batch.items()}


@pytest.mark.slow  # default run: too long for CI's 15 minutes on 2 cores
@pytest.mark.parametrize("scope", ["mini_batch", "micro_batch"])
@pytest.mark.parametrize("mode", AGG_MODES)
def test_padding_rows_change_no_update(scope, mode):
    """All-zero rows padding a mini-batch add no gradient, no NaN, and do not rescale the loss of the real rows
    (RAGEN pads with copies of real rows; under loss_scope="micro_batch" empty micro-batches used to count)."""
    batch = make_batch()
    batch["ref_logprobs"] = batch["old_logprobs"] - 0.05 * batch["loss_mask"]
    algo = dataclasses.replace(BASE, policy_loss="vanilla", loss_agg_mode=mode, loss_scope=scope, use_kl_loss=True,
                               kl_loss_coef=0.3, kl_loss_type="low_var_kl", entropy_coeff=0.02)
    before, _, alone, _, alone_metrics = actor_update(algo, batch, micro=1)
    *_, padded, _, padded_metrics = actor_update(algo, _zero_rows(batch, ROWS), micro=1)
    for a, b, b0 in zip(padded, alone, before):
        assert np.isfinite(a).all()
        np.testing.assert_allclose(a - b0, b - b0, rtol=1e-4, atol=DELTA_ATOL)
    assert max(np.abs(b - b0).max() for b, b0 in zip(alone, before)) > 1e-4
    assert alone_metrics["pg_clipfrac"] > 0.05  # the clip fractions are averages over micro-batches with tokens
    for key in ("loss", "pg_loss", "entropy_loss", "kl_loss", "pg_clipfrac", "pg_clipfrac_lower", "ppo_kl"):
        np.testing.assert_allclose(padded_metrics[key], alone_metrics[key], rtol=1e-5, atol=1e-6, err_msg=key)


@pytest.mark.slow  # default run: too long for CI's 15 minutes on 2 cores
def test_the_critic_aggregates_by_its_own_mode():
    """RAGEN's critic is token-mean whatever the actor's loss_agg_mode (`algo.critic_loss_agg_mode`)."""
    from ragen_jax.models import ValueModel
    from ragen_jax.models.tiny import make_tiny_model

    policy, _ = make_tiny_model(seed=0, hidden_size=32, num_layers=1, num_heads=2, num_kv_heads=1,
                                intermediate_size=64)
    graphdef, params, frozen = nnx.split(ValueModel.from_causal_lm(policy, rngs=nnx.Rngs(1)), nnx.Param, ...)
    raw = make_batch()
    rng = np.random.default_rng(0)
    batch = {"tokens": raw["tokens"], "attention_mask": raw["attention_mask"], "loss_mask": raw["loss_mask"],
             "values": np.zeros_like(raw["loss_mask"]),
             "returns": (rng.normal(size=raw["loss_mask"].shape) * raw["loss_mask"]).astype(np.float32)}

    def vf_loss(**modes):
        algo = dataclasses.replace(BASE, **modes)
        fns = make_step_fns(graphdef, graphdef, algo, TX, TX, ROWS)
        args = jax.tree.map(jnp.copy, (params, TX.init(params)))
        return float(fns["critic_update"](*args, frozen, {k: jnp.asarray(v) for k, v in batch.items()})[2]["vf_loss"])

    token_mean = vf_loss(loss_agg_mode="token-mean", critic_loss_agg_mode="token-mean")
    assert vf_loss(loss_agg_mode="seq-mean-token-sum", critic_loss_agg_mode="token-mean") == token_mean
    assert abs(vf_loss(loss_agg_mode="token-mean", critic_loss_agg_mode="seq-mean-token-sum") - token_mean) > 1e-3


@pytest.mark.parametrize("rule", ["reward", "turn"])
def test_bi_level_turn_ends_follow_the_configured_rule(rule):
    """Bi-level GAE's turns end at non-zero rewards (RAGEN) or at every assistant span's end."""
    from ragen_jax.algos import AdvantageInputs, bilevel_gae, turn_ends_from_mask

    mask = np.array([[0, 1, 1, 0, 0, 1, 1, 1, 0], [0, 1, 1, 1, 0, 1, 1, 0, 0]], np.float32)
    rewards = np.zeros_like(mask)
    rewards[0, 7] = 1.0  # the episode's score on its last token only (no turn scores)
    rewards[1, 3], rewards[1, 6] = 0.5, -0.2
    values = np.random.default_rng(0).normal(size=mask.shape).astype(np.float32) * mask
    algo = dataclasses.replace(BASE, adv_estimator="bilevel_gae", bi_level_turn_ends=rule, high_level_gamma=0.9,
                               gamma=0.95, lam=0.9)
    fns = make_step_fns(*split_actor()[:1], None, algo, TX, None, ROWS)
    adv, ret = fns["advantages"](jnp.asarray(rewards), jnp.asarray(mask), jnp.asarray(values), jnp.array([0, 1]))
    ends = None if rule == "reward" else turn_ends_from_mask(jnp.asarray(mask))
    want_adv, want_ret = bilevel_gae(AdvantageInputs(jnp.asarray(rewards), jnp.asarray(mask), values=jnp.asarray(
        values), turn_end_mask=ends), gamma=0.95, lam=0.9, high_level_gamma=0.9)
    np.testing.assert_allclose(adv, want_adv, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(ret, want_ret, rtol=1e-5, atol=1e-6)
    other = bilevel_gae(AdvantageInputs(jnp.asarray(rewards), jnp.asarray(mask), values=jnp.asarray(values),
                                        turn_end_mask=turn_ends_from_mask(jnp.asarray(mask)) if rule == "reward"
                                        else None), gamma=0.95, lam=0.9, high_level_gamma=0.9)[1]
    assert np.abs(np.asarray(other) - np.asarray(ret)).max() > 1e-3  # the two rules give other returns here


@pytest.mark.slow  # default run: too long for CI's 15 minutes on 2 cores
@pytest.mark.parametrize("scope", ["mini_batch", "micro_batch"])
def test_loss_scale_factor_keeps_the_sum_norm_loss_off_the_padded_width(scope):
    """The trainer pads rows to a bucketed width, so seq-mean-token-sum-norm's default horizon (the width, as veRL
    and RAGEN) moves from step to step; algo.loss_scale_factor fixes it, and the same rows then train alike."""
    batch = make_batch()
    wider = {k: np.pad(v, ((0, 0), (0, 6))) for k, v in batch.items()}  # padding columns: nothing attended
    algo = dataclasses.replace(BASE, policy_loss="vanilla", loss_agg_mode="seq-mean-token-sum-norm", loss_scope=scope)
    fixed = dataclasses.replace(algo, loss_scale_factor=32)
    before, _, narrow, _, narrow_metrics = actor_update(fixed, batch, micro=2)
    *_, wide, _, wide_metrics = actor_update(fixed, wider, micro=2)
    for a, b, b0 in zip(wide, narrow, before):
        np.testing.assert_allclose(a - b0, b - b0, rtol=1e-4, atol=DELTA_ATOL)
    np.testing.assert_allclose(wide_metrics["loss"], narrow_metrics["loss"], rtol=1e-5, atol=1e-6)
    *_, default_narrow = actor_update(algo, batch, micro=2)
    *_, default_wide = actor_update(algo, wider, micro=2)
    width = batch["loss_mask"].shape[1]
    np.testing.assert_allclose(default_narrow["loss"], narrow_metrics["loss"] * 32 / width, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(default_wide["loss"], default_narrow["loss"] * width / (width + 6), rtol=1e-5, atol=1e-6)


def test_the_config_sets_the_sum_norm_horizon():
    cfg = get_base_config()
    assert cfg.algo.loss_scale_factor == 0 and AlgoSettings.of(validate_config(cfg)).loss_scale_factor is None  # the padded width
    cfg.algo.loss_scale_factor = cfg.rollout.max_model_len
    assert AlgoSettings.of(validate_config(cfg)).loss_scale_factor == cfg.rollout.max_model_len


def test_tokens_trained_in_a_shortened_context_leave_the_sampler_comparison():
    """A "full" row that dropped old turns trains its earlier turns in a shorter context than they were sampled in;
    their sampler log-probs measure that change, so they take the trainer's and read as no mismatch."""
    from ragen_jax.algos import ROLLOUT_CORRECTIONS
    from ragen_jax.trainer.batch_stats import in_row_context, sampler_agreement

    batch = make_batch()
    mask, old = batch["loss_mask"], batch["old_logprobs"]
    sample = old - 0.7 * mask  # far off: icepop drops every token whose sampler disagrees so much
    same = np.ones_like(mask, bool)
    same[:3] = False  # rows 0-2: sampled seeing turns the rows no longer hold
    aligned, metrics = in_row_context(old, sample, same, mask)
    aligned = np.asarray(aligned)
    assert np.array_equal(aligned[:3], old[:3]) and np.array_equal(aligned[3:], sample[3:])
    np.testing.assert_allclose(metrics["rollout/context_changed_token_ratio"], mask[:3].sum() / mask.sum(), rtol=1e-6)
    weights, keep, _ = ROLLOUT_CORRECTIONS.get("icepop")(old, aligned, mask, bound=2.0)
    keep, on = np.asarray(keep), mask > 0
    assert keep[:3][on[:3]].all() and not keep[3:][on[3:]].any()
    np.testing.assert_allclose(np.asarray(weights)[:3][mask[:3] > 0], 1.0)
    agreement = sampler_agreement(old[:3], aligned[:3], mask[:3])
    assert float(agreement["rollout/logprob_abs_diff_max"]) == 0.0


def test_an_optimizer_scaled_outside_steps_as_adamw_at_that_rate():
    """make_optimizer(lr_outside=True) + guarded_apply(lr) is AdamW (weight decay included) at rate lr, with a state
    of the same structure, so checkpoints of either restore into the other."""
    from ragen_jax.optim import make_optimizer

    cfg = dict(weight_decay=0.1, b1=0.9, b2=0.999, eps=1e-8, warmup_steps=0, schedule="constant", grad_clip=1.0)
    params = {"w": jnp.linspace(-1.0, 1.0, 6).reshape(2, 3)}
    fixed, _ = make_optimizer(dict(cfg, lr=3e-2), 10)
    outside, schedule = make_optimizer(dict(cfg, lr=3e-2), 10, lr_outside=True)
    assert jax.tree.structure(fixed.init(params)) == jax.tree.structure(outside.init(params))
    a, oa, b, ob = params, fixed.init(params), params, outside.init(params)
    for i in range(3):
        grads = {"w": jnp.cos(a["w"] * (i + 1))}
        a, oa = guarded_apply(fixed, a, oa, grads, jnp.float32(0.0))[:2]
        b, ob = guarded_apply(outside, b, ob, grads, jnp.float32(0.0), jnp.float32(schedule(i)))[:2]
        np.testing.assert_allclose(b["w"], a["w"], rtol=1e-6, atol=1e-8)
    assert np.abs(np.asarray(a["w"] - params["w"])).max() > 1e-2


@pytest.mark.parametrize("warmup, total, floor, cycles", [(0, 10, 0.0, 0.5), (3, 10, 0.1, 0.5), (2, 9, 0.0, 1.0),
                                                          (1, 8, 0.2, 1.5)])
def test_the_cosine_schedule_is_verls_with_min_lr_ratio_and_num_cycles(warmup, total, floor, cycles):
    """veRL's get_cosine_schedule_with_warmup, written out here: linear warmup from 0, then
    max(floor, floor + (1 - floor)(1 + cos(2 pi cycles p)) / 2) at progress p; before, min_lr_ratio and num_cycles
    did not exist here and the decay always reached 0 in one half-wave."""
    from ragen_jax.optim import make_schedule

    def verl(i):
        if i < warmup:
            return i / max(1, warmup)
        x = math.cos(math.pi * cycles * 2.0 * (i - warmup) / max(1, total - warmup))
        return max(floor, x * (1 - floor) * 0.5 + (1 + floor) * 0.5)

    schedule = make_schedule(dict(lr=2e-3, warmup_steps=warmup, schedule="cosine", min_lr_ratio=floor,
                                  num_cycles=cycles), total)
    np.testing.assert_allclose([float(schedule(i)) for i in range(total)], [2e-3 * verl(i) for i in range(total)],
                               rtol=1e-5, atol=1e-10)


@pytest.mark.parametrize("ratio, total, warmup", [(0.1, 200, 20), (0.25, 10, 2), (0.05, 10, 0)])
def test_a_warmup_ratio_is_verls_lr_warmup_steps_ratio(ratio, total, warmup):
    """veRL: int(lr_warmup_steps_ratio * total_training_steps) warmup steps when no step count is given."""
    from ragen_jax.optim import make_schedule

    cfg = dict(lr=1e-3, warmup_steps=0, warmup_steps_ratio=ratio, schedule="constant")
    by_ratio = make_schedule(cfg, total)
    by_steps = make_schedule(dict(cfg, warmup_steps=warmup, warmup_steps_ratio=0.0), total)
    assert [float(by_ratio(i)) for i in range(total)] == [float(by_steps(i)) for i in range(total)]
    assert float(by_ratio(0)) == (0.0 if warmup else 1e-3)


@pytest.mark.slow  # default run: too long for CI's 15 minutes on 2 cores
def test_algo_kwargs_reach_the_functions_that_name_them():
    """config.algo.kwargs: a custom estimator's and a custom policy loss's own keywords, set from the config."""
    from ragen_jax.algos import ADVANTAGE_ESTIMATORS, POLICY_LOSSES

    def scaled_outcome(inputs, *, scale=1.0):
        adv = scale * inputs.token_level_rewards.sum(-1, keepdims=True) * inputs.response_mask
        return adv, adv

    def weighted_pg(logprobs, old_logprobs, advantages, response_mask, *, pg_weight=1.0):
        return -pg_weight * advantages * jnp.exp(logprobs - old_logprobs) * response_mask, {}

    ADVANTAGE_ESTIMATORS.register("test_scaled_outcome", scaled_outcome)
    POLICY_LOSSES.register("test_weighted_pg", weighted_pg)
    try:
        batch = make_batch()
        rewards = np.zeros_like(batch["loss_mask"])
        rewards[:, -1] = np.arange(ROWS)
        args = (rewards, batch["loss_mask"], np.zeros_like(rewards), np.arange(ROWS), np.arange(ROWS))

        def run(**kwargs):
            algo = dataclasses.replace(BASE, adv_estimator="test_scaled_outcome", policy_loss="test_weighted_pg",
                                       entropy_coeff=0.0, kwargs=tuple(sorted(kwargs.items())))
            graphdef, trainable, frozen = split_actor()
            fns = make_step_fns(graphdef, None, algo, TX, None, ROWS)
            adv = np.asarray(fns["advantages"](*(jnp.asarray(a) for a in args))[0])
            return adv, actor_update(algo, dict(batch, advantages=adv.astype(np.float32)))[-1]["pg_loss"]

        adv, loss = run()
        adv3, loss3 = run(scale=3.0)
        np.testing.assert_allclose(adv3, 3 * adv)
        np.testing.assert_allclose(run(scale=3.0, pg_weight=0.5)[1], 0.5 * loss3, rtol=1e-5, atol=1e-6)
        assert abs(loss3) > 1e-3
    finally:
        ADVANTAGE_ESTIMATORS.unregister("test_scaled_outcome")
        POLICY_LOSSES.unregister("test_weighted_pg")


def test_the_config_gives_algo_kwargs_as_sorted_pairs():
    from ragen_jax.algos.settings import parse_algo_kwargs

    from ragen_jax.algos import ADVANTAGE_ESTIMATORS

    def binned_outcome(inputs, *, scale=1.0, bins=(), mode="a"):
        adv = scale * inputs.token_level_rewards.sum(-1, keepdims=True) * inputs.response_mask
        return adv, adv

    cfg = get_base_config()
    assert cfg.algo.kwargs == "" and AlgoSettings.of(validate_config(cfg)).kwargs == ()
    ADVANTAGE_ESTIMATORS.register("test_binned_outcome", binned_outcome)
    try:
        cfg.algo.adv_estimator = "test_binned_outcome"
        cfg.algo.kwargs = '{"scale": 2.0, "bins": [1, 2], "mode": "x"}'
        assert AlgoSettings.of(validate_config(cfg)).kwargs == (("bins", (1, 2)), ("mode", "x"), ("scale", 2.0))
        hash(AlgoSettings.of(validate_config(cfg)))  # static under jit
    finally:
        ADVANTAGE_ESTIMATORS.unregister("test_binned_outcome")
    with pytest.raises(ValueError, match="is not JSON"):
        parse_algo_kwargs("{scale: 2}")


def test_bfloat16_weights_take_updates_below_their_resolution_through_a_float32_master():
    """An actor lr of 1e-6 moves a bfloat16 weight of 1.0 by far less than its spacing (2^-7): the rounded weight
    never changed, so a bf16 run (a Qwen checkpoint's own dtype) trained nothing. The master copy in the optimizer
    state gathers the updates and the weight follows it; float32 parameters keep their plain state and values."""
    from ragen_jax.optim import MasterWeights, make_optimizer

    cfg = dict(lr=1.0, weight_decay=0.0, b1=0.9, b2=0.999, eps=1e-8, warmup_steps=0, schedule="constant",
               grad_clip=1.0)
    tx, _ = make_optimizer(cfg, 10, lr_outside=True)
    step = jax.jit(lambda p, o: guarded_apply(tx, p, o, jax.tree.map(jnp.ones_like, p), jnp.float32(0.0),
                                              jnp.float32(1e-4))[:2])
    params = {"w": jnp.ones((4,), jnp.bfloat16)}
    opt = tx.init(params)
    assert isinstance(opt, MasterWeights) and opt.master["w"].dtype == jnp.float32
    for _ in range(100):
        params, opt = step(params, opt)
    assert params["w"].dtype == jnp.bfloat16
    np.testing.assert_allclose(np.asarray(opt.master["w"]), 1.0 - 100 * 1e-4, rtol=1e-5)
    assert float(params["w"][0]) == float(jnp.bfloat16(1.0 - 100 * 1e-4))  # 0.9921875, not 1.0

    wide = {"w": jnp.ones((4,), jnp.float32)}
    wide_opt = tx.init(wide)
    assert not isinstance(wide_opt, MasterWeights)  # float32 runs: the state (and old checkpoints) as before
    plain_tx, _ = make_optimizer(dict(cfg, state_dtype=""), 10, lr_outside=True)
    plain_params, plain_opt = {"w": jnp.ones((4,), jnp.float32)}, plain_tx.init({"w": jnp.ones((4,), jnp.float32)})
    for _ in range(3):
        wide, wide_opt = step(wide, wide_opt)
        plain_params, plain_opt, _, _ = guarded_apply(plain_tx, plain_params, plain_opt, jax.tree.map(
            jnp.ones_like, plain_params), jnp.float32(0.0), jnp.float32(1e-4))
    np.testing.assert_array_equal(np.asarray(wide["w"]), np.asarray(plain_params["w"]))


def test_a_master_copy_of_mixed_dtype_parameters_shares_no_buffer_with_them():
    """A bfloat16 critic's float32 value head: its master leaf was the parameter itself (astype to its own dtype
    returns the array), so the update step, which donates both, failed on the first step of a bf16 GAE run with
    "Attempt to donate the same buffer twice"."""
    from ragen_jax.optim import MasterWeights, make_optimizer

    cfg = dict(lr=1.0, weight_decay=0.0, b1=0.9, b2=0.999, eps=1e-8, warmup_steps=0, schedule="constant",
               grad_clip=1.0)
    tx, _ = make_optimizer(cfg, 10, lr_outside=True)
    step = jax.jit(lambda p, o: guarded_apply(tx, p, o, jax.tree.map(jnp.ones_like, p), jnp.float32(0.0),
                                              jnp.float32(1e-2))[:2], donate_argnums=(0, 1))
    params = {"w": jnp.ones((4,), jnp.bfloat16), "head": jnp.ones((4,), jnp.float32)}
    opt = tx.init(params)
    assert isinstance(opt, MasterWeights) and opt.master["head"] is not params["head"]
    params, opt = step(params, opt)
    np.testing.assert_allclose(np.asarray(params["head"]), 0.99, rtol=1e-6)
    np.testing.assert_array_equal(np.asarray(opt.master["head"]), np.asarray(params["head"]))


@pytest.mark.slow  # default run: too long for CI's 15 minutes on 2 cores
@pytest.mark.parametrize("micro", [1, 2])
def test_a_steps_update_metrics_are_verls_flat_mean_over_micro_batches(micro):
    """veRL appends one value per micro-batch (append_to_dict) and logs their flat mean (reduce_metrics): a
    mini-batch padded with empty rows weighs its micro-batches with tokens, not the mini-batch as a whole.
    Plain numpy on the model's own log-probs (a zero learning rate keeps the model the same for every update)."""
    raw = make_batch()
    real, mini = 5, 4
    batch = _zero_rows({k: v[:real] for k, v in raw.items()}, 2 * mini - real)  # [4 real] [1 real + 3 padding]
    algo = dataclasses.replace(BASE, policy_loss="vanilla", clip_ratio_low=0.002, clip_ratio_high=0.002)
    graphdef, trainable, frozen = split_actor()
    fns = make_step_fns(graphdef, None, algo, optax.sgd(0.0), None, micro)
    lp = np.asarray(fns["score_policy"](trainable, frozen, batch["tokens"], batch["attention_mask"])[0])
    updates = []
    for rows in (slice(0, mini), slice(mini, 2 * mini)):
        params, opt = jax.tree.map(jnp.copy, (trainable, optax.sgd(0.0).init(trainable)))  # the update donates
        updates.append(fns["actor_update"](params, opt, frozen, {k: jnp.asarray(v[rows]) for k, v in batch.items()})[2])
    step = mean_update_metrics(updates)

    mask, adv, log_ratio = batch["loss_mask"], batch["advantages"], np.clip(lp - batch["old_logprobs"], -20, 20)
    ratio = np.exp(log_ratio)
    clipped = (-adv * np.clip(ratio, 1 - 0.002, 1 + 0.002) > -adv * ratio).astype(np.float64)
    per_micro = {"ppo_kl": [], "pg_clipfrac": []}
    for i in range(0, len(mask), micro):
        m = mask[i:i + micro]
        if m.sum() > 0:  # RAGEN pads with copies of real rows: it has no micro-batch without tokens
            per_micro["ppo_kl"].append((-log_ratio[i:i + micro] * m).sum() / m.sum())
            per_micro["pg_clipfrac"].append((clipped[i:i + micro] * m).sum() / m.sum())
    assert 0.05 < np.mean(per_micro["pg_clipfrac"]) < 0.95
    for key, values in per_micro.items():
        np.testing.assert_allclose(step[key], np.mean(values), rtol=1e-4, atol=1e-6, err_msg=key)
    for key in ("loss", "pg_loss", "grad_norm"):  # computed once per mini-batch: veRL's grad_norm, one per update
        np.testing.assert_allclose(step[key], np.mean([float(u[key]) for u in updates]), rtol=1e-6, atol=1e-6,
                                   err_msg=key)
    assert "micro_batches_trained" not in step
