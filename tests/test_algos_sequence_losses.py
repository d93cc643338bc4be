"""GSPO, GSPO-token and CISPO: hand-computed cases, and gradients against jax.grad of the written-out
objective on random masked batches in every aggregation mode, with and without jit."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from algos_testlib import run  # noqa: F401 (a fixture)
from ragen_jax import algos

MODES = ["token-mean", "seq-mean-token-mean", "seq-mean-token-sum", "seq-mean-token-sum-norm"]


def f32(*xs):
    return [jnp.asarray(x, jnp.float32) for x in xs]


# Rows: log-ratios with a masked outlier, a clipped-high row, a clipped-low row (A < 0), an empty row.
OLD = np.array([[-1.0, -2.0, -3.0], [-1.0, -1.0, -1.0], [-2.0, -2.0, -2.0], [-1.0, -1.0, -1.0]])
LOG_RATIO = np.array([[0.2, 0.0, 5.0], [0.6, 0.4, 0.0], [-1.0, -0.4, 0.0], [0.0, 0.0, 0.0]])
ADV = np.array([[1.0, 1.0, 1.0], [1.0, 1.0, 1.0], [-1.0, -1.0, -1.0], [1.0, 1.0, 1.0]])
MASK = np.array([[1, 1, 0], [1, 1, 0], [1, 1, 0], [0, 0, 0]])


@pytest.mark.parametrize("name", ["gspo", "gspo_token"])
def test_gspo_hand_computed(run, name):
    loss, metrics = run(algos.POLICY_LOSSES.get(name), *f32(OLD + LOG_RATIO, OLD, ADV), jnp.asarray(MASK),
                        clip_ratio_low=0.2, clip_ratio_high=0.28)
    # s_i = exp(mean of the row's unmasked log-ratios): e^0.1 (inside), e^0.5 = 1.65 (> 1.28: clipped),
    # e^-0.7 = 0.50 with A = -1 (< 0.8: clipped, loss -A * 0.8); the empty row gives 0.
    s0 = np.exp(0.1)
    np.testing.assert_allclose(loss, [[-s0, -s0, 0.0], [-1.28, -1.28, 0.0], [0.8, 0.8, 0.0], [0.0, 0.0, 0.0]],
                               rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(metrics["pg_clipfrac"], 4 / 6, rtol=1e-6)
    np.testing.assert_allclose(metrics["ppo_kl"], -(0.2 + 0.0 + 0.6 + 0.4 - 1.0 - 0.4) / 6, atol=1e-6)


@pytest.mark.parametrize("name", ["gspo", "gspo_token"])
def test_gspo_gradient_hand_computed(name):
    fn = algos.POLICY_LOSSES.get(name)
    total = lambda lp: fn(lp, *f32(OLD, ADV), jnp.asarray(MASK), clip_ratio_low=0.2,  # noqa: E731
                          clip_ratio_high=0.28)[0].sum()
    grad = jax.grad(total)(*f32(OLD + LOG_RATIO))
    # Row 0 (unclipped): gspo: each token's loss is -s, so d(-2 s)/d logp_t = -2 s / 2; gspo_token: token t's
    # loss -sg[s] pi_t / sg[pi_t] has gradient -s. Clipped rows, masked tokens and the empty row: 0.
    s0 = np.exp(0.1)
    np.testing.assert_allclose(grad, [[-s0, -s0, 0.0], [0.0] * 3, [0.0] * 3, [0.0] * 3], rtol=1e-5, atol=1e-6)


def test_gspo_uses_the_sequence_advantage_and_gspo_token_the_token_advantages(run):
    lp, old, adv = f32([[-0.9, -1.9]], [[-1.0, -2.0]], [[2.0, 0.0]])
    mask = jnp.ones((1, 2), jnp.int32)
    s = np.exp(0.1)
    seq, _ = run(algos.gspo_loss, lp, old, adv, mask, clip_ratio_low=0.2, clip_ratio_high=0.28)
    np.testing.assert_allclose(seq, [[-s, -s]], rtol=1e-5, atol=1e-6)  # A_i = mean(2, 0) = 1 on both tokens
    tok, _ = run(algos.gspo_token_loss, lp, old, adv, mask, clip_ratio_low=0.2, clip_ratio_high=0.28)
    np.testing.assert_allclose(tok, [[-2 * s, 0.0]], rtol=1e-5, atol=1e-6)  # value s_i times each token's own A_t


CISPO_OLD = np.array([[-1.0, -2.0, -0.5, -3.0, -1.0, -4.0]])
CISPO_RATIO = np.array([[1.5, 0.5, 8.0, 0.05, 1.0, 100.0]])
CISPO_ADV = np.array([[1.0, -1.0, 1.0, 2.0, -3.0, 1.0]])
CISPO_MASK = np.array([[1, 1, 1, 1, 1, 0]])


@pytest.mark.parametrize("low,high,weights", [
    (1.0, 5.0, [1.5, 0.5, 6.0, 0.05, 1.0]),  # the defaults: no lower bound, cap 6
    (0.2, 0.28, [1.28, 0.8, 1.28, 0.8, 1.0]),  # a PPO-like range clips both sides
])
def test_cispo_hand_computed(run, low, high, weights):
    lp = CISPO_OLD + np.log(CISPO_RATIO)
    loss, metrics = run(algos.cispo_loss, *f32(lp, CISPO_OLD, CISPO_ADV), jnp.asarray(CISPO_MASK),
                        clip_ratio_low=low, clip_ratio_high=high)
    w = np.array(weights)
    np.testing.assert_allclose(loss[0, :5], -w * CISPO_ADV[0, :5] * lp[0, :5], rtol=1e-5, atol=1e-6)
    assert float(loss[0, 5]) == 0.0
    clipped = np.sum(~np.isclose(w, CISPO_RATIO[0, :5]))
    np.testing.assert_allclose(metrics["pg_clipfrac"], clipped / 5, rtol=1e-6)
    np.testing.assert_allclose(metrics["cispo_weight_mean"], w.mean(), rtol=1e-5, atol=1e-6)
    grad = jax.grad(lambda x: algos.cispo_loss(x, *f32(CISPO_OLD, CISPO_ADV), jnp.asarray(CISPO_MASK),
                                               clip_ratio_low=low, clip_ratio_high=high)[0].sum())(*f32(lp))
    # the weight is a constant: d/d logp_t = -w_t A_t on every token, clipped or not (none is dropped)
    np.testing.assert_allclose(grad[0], np.append(-w * CISPO_ADV[0, :5], 0.0), rtol=1e-5, atol=1e-6)


def test_cispo_defaults_are_the_documented_ones():
    assert (algos.policy_loss.CISPO_CLIP_LOW, algos.policy_loss.CISPO_CLIP_HIGH) == (1.0, 5.0)
    assert (algos.policy_loss.GSPO_CLIP_LOW, algos.policy_loss.GSPO_CLIP_HIGH) == (3e-4, 4e-4)
    lp, old = f32([[np.log(0.01) - 1.0, np.log(9.0) - 1.0]], [[-1.0, -1.0]])
    _, m = algos.cispo_loss(lp, old, *f32([[1.0, 1.0]]), jnp.ones((1, 2)))
    # 0.01 kept, 9 capped at 6
    np.testing.assert_allclose(m["cispo_weight_mean"], (0.01 + 6.0) / 2, rtol=1e-5, atol=1e-6)


# ---- gradients against the written-out objectives (python loops over rows, no library code but jnp)

def aggregate_by_hand(per_token, mask, mode):
    """The aggregation modes' definitions, row by row (mask is numpy, so the loops are static)."""
    rows = [np.nonzero(m)[0] for m in mask]
    sums = [per_token[i, r].sum() for i, r in enumerate(rows) if len(r)]
    if mode == "token-mean":
        return sum(sums) / mask.sum()
    if mode == "seq-mean-token-mean":
        return sum(per_token[i, r].mean() for i, r in enumerate(rows) if len(r)) / len(sums)
    if mode == "seq-mean-token-sum":
        return sum(sums) / len(sums)
    return sum(sums) / mask.shape[1]  # seq-mean-token-sum-norm


def gspo_by_hand(lp, old, adv, mask, low, high):
    out = jnp.zeros_like(lp)
    for i, r in enumerate(np.nonzero(m)[0] for m in mask):
        if len(r):
            s = jnp.exp(jnp.mean(lp[i, r] - old[i, r]))
            a = jnp.mean(adv[i, r])
            out = out.at[i, r].set(-jnp.minimum(s * a, jnp.clip(s, 1 - low, 1 + high) * a))
    return out


def gspo_token_by_hand(lp, old, adv, mask, low, high):
    out = jnp.zeros_like(lp)
    sg = jax.lax.stop_gradient
    for i, r in enumerate(np.nonzero(m)[0] for m in mask):
        if len(r):
            s = sg(jnp.exp(jnp.mean(lp[i, r] - old[i, r]))) * jnp.exp(lp[i, r] - sg(lp[i, r]))
            a = adv[i, r]
            out = out.at[i, r].set(-jnp.minimum(s * a, jnp.clip(s, 1 - low, 1 + high) * a))
    return out


def cispo_by_hand(lp, old, adv, mask, low, high):
    w = jax.lax.stop_gradient(jnp.clip(jnp.exp(lp - old), 1 - low, 1 + high))
    return jnp.where(mask.astype(bool), -w * adv * lp, 0.0)


BY_HAND = {"gspo": gspo_by_hand, "gspo_token": gspo_token_by_hand, "cispo": cispo_by_hand}
CLIPS = {"gspo": (0.03, 0.04), "gspo_token": (0.03, 0.04), "cispo": (0.05, 0.08)}


def random_batch(seed, b=7, t=6, row_constant_adv=False):
    """Random log-probs and advantages; rows 0 and 2 move beyond the clip ranges in their advantage's
    direction (clipped: no gradient), row 5 moves against it (kept), the others stay close."""
    rng = np.random.default_rng(seed)
    old = -rng.uniform(0.5, 3.0, (b, t))
    shift = np.array([0.1, 0.0, -0.1, 0.0, 0.0, -0.1, 0.0])[:, None]
    lp = old + shift + rng.normal(0.0, 0.02, (b, t))
    sign = np.array([1.0, -1.0, -1.0, 1.0, 1.0, 1.0, -1.0])[:, None]
    adv = np.broadcast_to(sign + 0.3 * rng.normal(size=(b, 1) if row_constant_adv else (b, t)), (b, t))
    lengths = np.array([6, 1, 3, 0, 2, 5, 4])  # uneven, with an empty row
    mask = (np.arange(t)[None, :] < lengths[:, None]).astype(np.int32)
    mask[5, 0] = 0  # a hole inside a row (a multi-turn row's env tokens)
    return lp, old, adv, mask


@pytest.mark.slow  # default run: too long for CI's 15 minutes on 2 cores
@pytest.mark.parametrize("jit", [False, True])
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("name", sorted(BY_HAND))
def test_gradient_equals_grad_of_written_out_objective(name, mode, jit):
    lp, old, adv, mask = random_batch(1)
    low, high = CLIPS[name]
    fn = algos.POLICY_LOSSES.get(name)

    def registered(x):
        loss, _ = fn(x, *f32(old, adv), jnp.asarray(mask), clip_ratio_low=low, clip_ratio_high=high)
        return algos.agg_loss(loss, jnp.asarray(mask), mode)

    def written_out(x):
        return aggregate_by_hand(BY_HAND[name](x, *f32(old, adv), mask, low, high), mask, mode)

    grad_fn = jax.jit(jax.value_and_grad(registered)) if jit else jax.value_and_grad(registered)
    value, grad = grad_fn(*f32(lp))
    want_value, want_grad = jax.value_and_grad(written_out)(*f32(lp))
    np.testing.assert_allclose(value, want_value, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(grad, want_grad, rtol=1e-4, atol=1e-6)
    assert np.all(np.asarray(grad)[mask == 0] == 0.0)
    # the batch exercises both sides: some response tokens get a gradient, some are clipped to none
    live = np.asarray(grad)[mask == 1] != 0.0
    assert live.any() and (name == "cispo" or not live.all())


def test_gspo_token_equals_gspo_when_advantages_are_constant_per_row():
    lp, old, adv, mask = random_batch(2, row_constant_adv=True)

    def agg(name, x):
        fn = algos.POLICY_LOSSES.get(name)
        loss, _ = fn(x, *f32(old, adv), jnp.asarray(mask), clip_ratio_low=0.03, clip_ratio_high=0.04)
        return algos.agg_loss(loss, jnp.asarray(mask), "seq-mean-token-mean")

    v_seq, g_seq = jax.value_and_grad(functools.partial(agg, "gspo"))(*f32(lp))
    v_tok, g_tok = jax.value_and_grad(functools.partial(agg, "gspo_token"))(*f32(lp))
    np.testing.assert_allclose(v_tok, v_seq, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(g_tok, g_seq, rtol=1e-5, atol=1e-7)
    assert np.abs(np.asarray(g_seq)).sum() > 0
