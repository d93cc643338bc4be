"""Policy, value, entropy and KL losses against hand-computed per-token cases."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from algos_testlib import run  # noqa: F401 (a fixture)
from ragen_jax import algos

# Tokens: (A, ratio) = (+1, 1.5) clip-high; (+1, 0.5) unclipped; (-1, 0.5) clip-low;
# (-1, 5) dual clip; (+1, 1.25) inside clip-higher (0.28) though outside 0.2; last is masked.
ADV = np.array([[1.0, 1.0, -1.0, -1.0, 1.0, -1.0]])
RATIO = np.array([[1.5, 0.5, 0.5, 5.0, 1.25, 100.0]])
MASK = np.array([[1, 1, 1, 1, 1, 0]])
OLD = np.array([[-1.0, -2.0, -0.5, -3.0, -1.5, -4.0]])
NEW = OLD + np.log(RATIO)


def _ppo(run, new=NEW, **kw):
    args = [jnp.asarray(x, jnp.float32) for x in (new, OLD, ADV)] + [jnp.asarray(MASK)]
    return run(algos.ppo_clip_loss, *args, **kw)


def test_ppo_clip_higher_and_dual_clip_hand_computed(run):
    loss, metrics = _ppo(run, clip_ratio_low=0.2, clip_ratio_high=0.28, clip_ratio_c=3.0)
    np.testing.assert_allclose(loss, [[-1.28, -0.5, 0.8, 3.0, -1.25, 0.0]], atol=1e-5)
    np.testing.assert_allclose(metrics["pg_clipfrac"], 2 / 5, atol=1e-6)  # tokens 0 and 2
    np.testing.assert_allclose(metrics["pg_clipfrac_lower"], 1 / 5, atol=1e-6)  # token 3
    np.testing.assert_allclose(metrics["ppo_kl"], -np.log(RATIO[0, :5]).mean(), atol=1e-5)


def test_ppo_symmetric_clip_and_no_dual_clip(run):
    loss, metrics = _ppo(run, clip_ratio_low=0.2, clip_ratio_c=None)
    # symmetric 0.2: token 4 is now clipped to 1.2; without dual clip token 3 keeps -A * r = 5
    np.testing.assert_allclose(loss, [[-1.2, -0.5, 0.8, 5.0, -1.2, 0.0]], atol=1e-5)
    np.testing.assert_allclose(metrics["pg_clipfrac"], 3 / 5, atol=1e-6)
    assert float(metrics["pg_clipfrac_lower"]) == 0.0


def test_ppo_gradient_only_through_unclipped_tokens():
    def total(new):
        loss, _ = algos.ppo_clip_loss(new, jnp.asarray(OLD, jnp.float32), jnp.asarray(ADV, jnp.float32),
                                      jnp.asarray(MASK), clip_ratio_low=0.2, clip_ratio_high=0.28)
        return loss.sum()

    grad = jax.grad(total)(jnp.asarray(NEW, jnp.float32))
    # d(-A r)/d logp = -A r on unclipped tokens; clipped, dual-clipped and masked tokens give 0
    np.testing.assert_allclose(grad, [[0.0, -0.5, 0.0, 0.0, -1.25, 0.0]], atol=1e-5)


def test_ppo_truncated_importance_weights(run):
    sampler = OLD - np.log(np.array([[0.5, 1.0, 4.0, 1.0, 2.0, 1.0]]))  # pi_old / pi_sampler
    base, _ = _ppo(run, clip_ratio_low=0.2, clip_ratio_high=0.28)
    loss, metrics = _ppo(run, clip_ratio_low=0.2, clip_ratio_high=0.28,
                         sampler_logprobs=jnp.asarray(sampler, jnp.float32), tis_cap=2.0)
    weights = np.array([[0.5, 1.0, 2.0, 1.0, 2.0, 1.0]])  # 4 is truncated to the cap 2
    np.testing.assert_allclose(loss, np.asarray(base) * weights, atol=1e-5)
    np.testing.assert_allclose(metrics["tis_weight_mean"], weights[0, :5].mean(), atol=1e-5)
    np.testing.assert_allclose(metrics["tis_clipfrac"], 2 / 5, atol=1e-6)


def test_ppo_rejects_bad_dual_clip():
    with pytest.raises(ValueError, match="clip_ratio_c"):
        _ppo(lambda f, *a, **k: f(*a, **k), clip_ratio_c=0.5)
    with pytest.raises(ValueError, match="tis_cap"):
        _ppo(lambda f, *a, **k: f(*a, **k), sampler_logprobs=jnp.asarray(OLD), tis_cap=0.0)


def test_reinforce_loss_and_entropy_bonus():
    lp = jnp.array([[-1.0, -2.0, -3.0]])
    adv = jnp.array([[2.0, -1.0, 5.0]])
    mask = jnp.array([[1, 1, 0]])
    loss, _ = algos.reinforce_loss(lp, lp, adv, mask)
    np.testing.assert_allclose(loss, [[2.0, -2.0, 0.0]])
    ent = algos.entropy_bonus_loss(jnp.array([[0.5, 1.0, 9.0]]), mask, coef=0.01)
    np.testing.assert_allclose(ent, [[-0.005, -0.01, 0.0]])


def test_clipped_value_loss_hand_computed(run):
    vpreds = jnp.array([[1.0, 2.0, 0.0, 3.0]])
    old = jnp.array([[0.0, 2.2, 0.0, 0.0]])
    returns = jnp.array([[1.0, 0.0, 1.0, 0.0]])
    mask = jnp.array([[1, 1, 1, 0]])
    loss, metrics = run(algos.clipped_value_loss, vpreds, old, returns, mask, cliprange_value=0.5)
    # t0: v 1 clipped to 0.5 -> max(0, 0.25); t1: within range -> 4; t2: equal -> 1; t3 masked
    np.testing.assert_allclose(loss, [[0.125, 2.0, 0.5, 0.0]], atol=1e-6)
    np.testing.assert_allclose(metrics["vf_clipfrac"], 1 / 3, atol=1e-6)
    mse, _ = run(algos.mse_value_loss, vpreds, old, returns, mask)
    np.testing.assert_allclose(mse, [[0.0, 2.0, 0.5, 0.0]], atol=1e-6)
    assert "clipped" in algos.VALUE_LOSSES and "mse" in algos.VALUE_LOSSES


def test_kl_estimators_hand_computed(run):
    lp = jnp.array([[-1.0, -2.0, -0.5, 0.0]])
    ref = jnp.array([[-1.5, -1.0, -0.5, -40.0]])
    d = np.asarray(lp - ref)  # [0.5, -1, 0, 40]
    np.testing.assert_allclose(run(algos.kl_penalty, lp, ref, kind="kl"), d, atol=1e-6)
    np.testing.assert_allclose(run(algos.kl_penalty, lp, ref, kind="k1"), d, atol=1e-6)
    np.testing.assert_allclose(run(algos.kl_penalty, lp, ref, kind="abs"), np.abs(d), atol=1e-6)
    np.testing.assert_allclose(run(algos.kl_penalty, lp, ref, kind="mse"), 0.5 * d**2, atol=1e-5)
    k3 = np.exp(-d[0, :3]) + d[0, :3] - 1  # exp(ref - lp) - (ref - lp) - 1
    got = np.asarray(run(algos.kl_penalty, lp, ref, kind="low_var_kl"))
    np.testing.assert_allclose(got[0, :3], k3, atol=1e-5)
    assert got[0, 3] == pytest.approx(10.0)  # clamped like veRL (raw value would be ~19)


def test_straight_through_kl_has_k2_gradient():
    lp, ref = jnp.array([[-1.0, -2.0]]), jnp.array([[-1.5, -1.0]])
    val = algos.kl_penalty(lp, ref, "k3+")
    np.testing.assert_allclose(val, algos.kl_penalty(lp, ref, "k3"), atol=1e-6)
    grad = jax.grad(lambda x: algos.kl_penalty(x, ref, "k3+").sum())(lp)
    np.testing.assert_allclose(grad, np.asarray(lp - ref), atol=1e-6)


def test_apply_kl_penalty_and_controllers(run):
    scores = jnp.array([[0.0, 1.0, 0.0], [0.0, 0.0, 2.0]])
    old = jnp.array([[-1.0, -1.0, -1.0], [-2.0, -2.0, -2.0]])
    ref = jnp.array([[-1.5, -0.5, -9.0], [-2.0, -1.0, -2.5]])
    mask = jnp.array([[1, 1, 0], [1, 1, 1]])
    rewards, kl = run(algos.apply_kl_penalty, scores, old, ref, mask, 0.1, kind="kl")
    # kl = [[0.5, -0.5, masked], [0, -1, 0.5]]
    np.testing.assert_allclose(rewards, [[-0.05, 1.05, 0.0], [0.0, 0.1, 1.95]], atol=1e-6)
    np.testing.assert_allclose(kl, (0.0 + (-0.5 / 3)) / 2, atol=1e-6)  # mean of row means
    fixed = algos.init_kl_controller("fixed", kl_coef=0.2)
    assert float(algos.update_kl_controller(fixed, 5.0, 64).value) == pytest.approx(0.2)
    ada = algos.init_kl_controller("adaptive", kl_coef=0.2, target_kl=0.1, horizon=100.0)
    up = jax.jit(algos.update_kl_controller, static_argnums=2)(ada, jnp.float32(1.0), 10)
    assert float(up.value) == pytest.approx(0.2 * (1 + 0.2 * 10 / 100))  # error clipped to +0.2
    down = algos.update_kl_controller(ada, 0.09, 10)
    assert float(down.value) == pytest.approx(0.2 * (1 - 0.1 * 10 / 100))
    with pytest.raises(ValueError, match="fixed"):
        algos.init_kl_controller("pid")


def test_apply_kl_penalty_current_kl_ignores_padding_rows(run):
    # the trainer pads a filtered batch with all-zero rows; they must not pull the controller's KL towards 0
    scores = jnp.zeros((2, 3))
    old = jnp.array([[-1.0, -1.0, -1.0], [-2.0, -2.0, -2.0]])
    ref = jnp.array([[-1.5, -0.5, -9.0], [-2.0, -1.0, -2.5]])
    mask = jnp.array([[1, 1, 0], [1, 1, 1]])
    _, kl = run(algos.apply_kl_penalty, scores, old, ref, mask, 0.1, kind="k3")
    pad = lambda x: jnp.concatenate([x, jnp.zeros((3, 3), x.dtype)])  # noqa: E731
    rewards, padded_kl = run(algos.apply_kl_penalty, pad(scores), pad(old), pad(ref), pad(mask), 0.1, kind="k3")
    np.testing.assert_allclose(padded_kl, kl, rtol=1e-6, atol=1e-6)
    assert float(kl) > 0 and np.all(np.asarray(rewards)[2:] == 0)


def _verl_ppo_np(new, old, adv, low, high, c):
    """veRL v0.6.1 compute_policy_loss_vanilla's per-token loss in float64."""
    ratio = np.exp(np.clip(new - old, -20.0, 20.0))
    clipped = np.maximum(-adv * ratio, -adv * np.clip(ratio, 1 - low, 1 + high))
    return np.where(adv < 0, np.minimum(-adv * c, clipped), clipped)


def _verl_agg_np(loss, mask, mode):
    """veRL v0.6.1 agg_loss in float64 (empty rows skipped by the seq-mean modes)."""
    rows, counts = (loss * mask).sum(-1), mask.sum(-1)
    if mode == "token-mean":
        return rows.sum() / counts.sum()
    if mode == "seq-mean-token-sum-norm":
        return rows.sum() / mask.shape[-1]
    per_row = rows / (counts + 1e-8) if mode == "seq-mean-token-mean" else rows
    return per_row[counts > 0].mean()


@pytest.mark.parametrize("seed", range(3))
def test_ppo_value_loss_and_aggregation_match_verl_on_ragged_masks(seed):
    rng = np.random.default_rng(seed)
    b, t = 6, 11
    mask = (rng.random((b, t)) < 0.6).astype(np.float64)  # holes in the middle of rows (env tokens)
    mask[0] = 0.0  # a filtered / failed row
    old = -rng.uniform(0.1, 3.0, (b, t))
    new = old + rng.normal(0.0, 0.6, (b, t))  # ratios well outside the clip range and past the dual clip
    adv = rng.normal(0.0, 2.0, (b, t))
    adv[0] = 1e30  # whatever sits in a masked row must not leak
    mask[1, :3], new[1, :3], adv[1, :3] = 1.0, old[1, :3] + 1.5, -1.0  # ratio e^1.5 > c = 3 with A < 0: dual clip
    f32 = lambda x: jnp.asarray(x, jnp.float32)  # noqa: E731
    loss, metrics = algos.ppo_clip_loss(f32(new), f32(old), f32(adv), f32(mask), clip_ratio_low=0.2,
                                        clip_ratio_high=0.28, clip_ratio_c=3.0)
    expected = _verl_ppo_np(new, old, adv, 0.2, 0.28, 3.0)
    on = mask > 0
    np.testing.assert_allclose(np.asarray(loss)[on], expected[on], rtol=1e-5, atol=1e-5)
    assert np.all(np.asarray(loss)[~on] == 0)
    dual = (adv < 0) & (np.maximum(-adv * np.exp(new - old), -adv * np.clip(np.exp(new - old), 0.8, 1.28)) > -3 * adv)
    assert dual[on].any()
    np.testing.assert_allclose(metrics["pg_clipfrac_lower"], dual[on].mean(), rtol=1e-5)
    for mode in ("token-mean", "seq-mean-token-mean", "seq-mean-token-sum", "seq-mean-token-sum-norm"):
        np.testing.assert_allclose(algos.agg_loss(loss, f32(mask), mode), _verl_agg_np(expected, mask, mode),
                                   rtol=1e-5, atol=1e-6, err_msg=mode)
    grad = jax.grad(lambda lp: algos.agg_loss(algos.ppo_clip_loss(lp, f32(old), f32(adv), f32(mask))[0],
                                              f32(mask)))(f32(new))
    assert np.isfinite(grad).all() and np.all(np.asarray(grad)[0] == 0)
    vpreds, values, returns = (rng.normal(size=(b, t)) for _ in range(3))
    vf, vf_metrics = algos.clipped_value_loss(f32(vpreds), f32(values), f32(returns), f32(mask), cliprange_value=0.5)
    unclipped = (vpreds - returns) ** 2
    clipped = (np.clip(vpreds, values - 0.5, values + 0.5) - returns) ** 2
    np.testing.assert_allclose(np.asarray(vf)[on], 0.5 * np.maximum(unclipped, clipped)[on], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(vf_metrics["vf_clipfrac"], (clipped > unclipped)[on].mean(), rtol=1e-5)
