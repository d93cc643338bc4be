"""Loss aggregation modes by hand, and exact gradient accumulation over micro-batches."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from ragen_jax import algos

LOSS = jnp.array([[1.0, 2.0, 3.0, 5.0], [4.0, 0.0, 0.0, 0.0], [9.0, 9.0, 9.0, 9.0]])
MASK = jnp.array([[1, 1, 0, 0], [1, 0, 0, 0], [0, 0, 0, 0]])  # the last row is empty padding

MODES = ["token-mean", "seq-mean-token-mean", "seq-mean-token-sum", "seq-mean-token-sum-norm"]
# token-mean: (1 + 2 + 4) / 3; seq-mean-token-mean: (1.5 + 4) / 2 non-empty rows;
# seq-mean-token-sum: (3 + 4) / 2; seq-mean-token-sum-norm: 7 / T with T = 4.
EXPECTED = {"token-mean": 7 / 3, "seq-mean-token-mean": 2.75, "seq-mean-token-sum": 3.5,
            "seq-mean-token-sum-norm": 7 / 4}
EXPECTED_PARTS = {"token-mean": (7.0, 3.0), "seq-mean-token-mean": (5.5, 2.0),
                  "seq-mean-token-sum": (7.0, 2.0), "seq-mean-token-sum-norm": (7.0, 4.0)}


@pytest.mark.parametrize("jit", [False, True])
@pytest.mark.parametrize("mode", MODES)
def test_modes_hand_computed(mode, jit):
    agg = jax.jit(algos.agg_loss, static_argnums=2) if jit else algos.agg_loss
    np.testing.assert_allclose(agg(LOSS, MASK, mode), EXPECTED[mode], rtol=1e-6)
    num, den = algos.agg_parts(LOSS, MASK, mode)
    np.testing.assert_allclose([num, den], EXPECTED_PARTS[mode], rtol=1e-6)


def test_unknown_mode_lists_known_names():
    with pytest.raises(KeyError, match="token-mean"):
        algos.agg_loss(LOSS, MASK, "token-median")


def _linear_policy_loss_parts(w, batch, mode, denominator):
    """Per-token PPO + entropy + k3 KL loss of a linear softmax policy, aggregated."""
    feats, targets, old_lp, ref_lp, adv, mask = batch
    logits = jnp.einsum("btf,fv->btv", feats, w)
    lp, ent = algos.logprobs_from_logits(logits, targets)
    pg, _ = algos.ppo_clip_loss(lp, old_lp, adv, mask, clip_ratio_low=0.2, clip_ratio_high=0.28)
    per_token = pg + algos.entropy_bonus_loss(ent, mask, 0.01) + 0.1 * algos.kl_penalty(lp, ref_lp, "low_var_kl")
    return algos.agg_loss(per_token, mask, mode, denominator=denominator)


def _random_batch(key, b=6, t=5, f=3, v=7):
    ks = jax.random.split(key, 6)
    feats = jax.random.normal(ks[0], (b, t, f))
    targets = jax.random.randint(ks[1], (b, t), 0, v)
    old_lp = -jax.random.uniform(ks[2], (b, t), minval=0.5, maxval=3.0)
    ref_lp = -jax.random.uniform(ks[3], (b, t), minval=0.5, maxval=3.0)
    adv = jax.random.normal(ks[4], (b, t))
    lengths = jnp.array([5, 1, 3, 0, 2, 4])  # uneven, with an empty row
    mask = (jnp.arange(t)[None, :] < lengths[:, None]).astype(jnp.int32)
    return feats, targets, old_lp, ref_lp, adv, mask


@pytest.mark.slow  # default run: too long for CI's 15 minutes on 2 cores
@pytest.mark.parametrize("mode", MODES)
def test_micro_batch_accumulation_equals_full_batch(mode):
    batch = _random_batch(jax.random.key(0))
    w = 0.3 * jax.random.normal(jax.random.key(1), (3, 7))
    mask = batch[-1]
    step = jax.jit(jax.value_and_grad(_linear_policy_loss_parts), static_argnums=2)
    full_loss, full_grad = step(w, batch, mode, None)
    denominator = algos.agg_denominator(mask, mode)  # of the whole mini-batch
    acc_loss, acc_grad = 0.0, jnp.zeros_like(w)
    for i in range(0, 6, 2):  # three micro-batches of two rows
        micro = tuple(x[i:i + 2] for x in batch)
        loss, grad = step(w, micro, mode, denominator)
        acc_loss, acc_grad = acc_loss + loss, acc_grad + grad
    np.testing.assert_allclose(acc_loss, full_loss, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(acc_grad, full_grad, rtol=1e-4, atol=1e-6)
    # Averaging per-micro-batch means is NOT exact for token-mean (micro-batches differ in tokens).
    if mode == "token-mean":
        naive = sum(step(w, tuple(x[i:i + 2] for x in batch), mode, None)[1] for i in range(0, 6, 2)) / 3
        assert not np.allclose(naive, full_grad, rtol=1e-3)


def test_custom_agg_mode_registration():
    def weighted_numerator(loss, mask):
        return (loss * mask * jnp.arange(1, loss.shape[1] + 1)).sum()

    algos.AGG_MODES.register("test-position-weighted",
                             algos.AggMode(weighted_numerator, lambda m: m.sum().astype(jnp.float32)))
    try:
        # (1*1 + 2*2 + 4*1) / 3 tokens
        np.testing.assert_allclose(algos.agg_loss(LOSS, MASK, "test-position-weighted"), 9 / 3)
    finally:
        algos.AGG_MODES.unregister("test-position-weighted")


def test_sum_norm_takes_a_constant_horizon():
    """seq-mean-token-sum-norm divides by the padded width unless algo.loss_scale_factor fixes the horizon
    (veRL's actor.loss_scale_factor): then widening the batch with padding columns leaves the loss alone."""
    wide_loss = jnp.pad(LOSS, ((0, 0), (0, 4)), constant_values=7.0)
    wide_mask = jnp.pad(MASK, ((0, 0), (0, 4)))
    mode = "seq-mean-token-sum-norm"
    assert float(algos.agg_loss(wide_loss, wide_mask, mode)) == pytest.approx(7 / 8)  # the width moved it
    for loss, mask in ((LOSS, MASK), (wide_loss, wide_mask)):
        np.testing.assert_allclose(algos.agg_loss(loss, mask, mode, loss_scale_factor=16), 7 / 16, rtol=1e-6)
        np.testing.assert_allclose(algos.agg_parts(loss, mask, mode, loss_scale_factor=16), (7.0, 16.0))
    for other in MODES[:3]:  # the other modes have no horizon
        np.testing.assert_allclose(algos.agg_loss(LOSS, MASK, other, loss_scale_factor=16), EXPECTED[other])
    for bad in (0, -3):
        with pytest.raises(ValueError, match="loss_scale_factor must be a positive number"):
            algos.agg_denominator(MASK, mode, loss_scale_factor=bad)


def test_a_custom_denominator_may_take_the_loss_scale_factor():
    seen = []

    def horizon_rows(mask, loss_scale_factor=None):
        seen.append(loss_scale_factor)
        return (mask.sum(axis=-1) > 0).sum().astype(jnp.float32) * (loss_scale_factor or mask.shape[-1])

    algos.AGG_MODES.register("test-rows-times-horizon", algos.AggMode(lambda l, m: (l * m).sum(), horizon_rows))
    try:
        np.testing.assert_allclose(algos.agg_loss(LOSS, MASK, "test-rows-times-horizon", loss_scale_factor=10),
                                   7 / 20)
        np.testing.assert_allclose(algos.agg_loss(LOSS, MASK, "test-rows-times-horizon"), 7 / 8)
        assert seen == [10, None]
    finally:
        algos.AGG_MODES.unregister("test-rows-times-horizon")
