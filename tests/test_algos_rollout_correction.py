"""Rollout corrections (sampler/trainer mismatch): hand-computed weights, masks and metrics, with and
without jit; bound and configuration errors."""

import jax.numpy as jnp
import numpy as np
import pytest

from algos_testlib import run  # noqa: F401 (a fixture)
from ragen_jax import algos

# rho = pi_old / pi_sampler per token; the last token is outside the response mask.
RHO = np.array([[1.0, 1.5, 3.0, 0.4, 0.6, 10.0]])
OLD = np.array([[-1.0, -2.0, -0.5, -3.0, -1.5, -2.0]])
SAMPLER = OLD - np.log(RHO)
MASK = np.array([[1, 1, 1, 1, 1, 0]])


def _correct(run, name, old=OLD, sampler=SAMPLER, mask=MASK, **kw):
    fn = algos.ROLLOUT_CORRECTIONS.get(name)
    return run(fn, jnp.asarray(old, jnp.float32), jnp.asarray(sampler, jnp.float32), jnp.asarray(mask), **kw)


def test_icepop_masks_tokens_outside_the_band_and_weights_the_rest(run):
    weights, keep, metrics = _correct(run, "icepop", bound=2.0)
    # band [0.5, 2]: 3.0 and 0.4 leave the loss; the kept tokens carry rho (IcePop's M(rho) = rho in the band)
    np.testing.assert_array_equal(np.asarray(keep)[0, :5], [True, True, False, False, True])
    np.testing.assert_allclose(np.asarray(weights)[0, :5], [1.0, 1.5, 0.0, 0.0, 0.6], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(metrics["rollout_corr_token_masked_frac"], 2 / 5, rtol=1e-6)
    np.testing.assert_allclose(metrics["rollout_corr_weight_mean"], (1.0 + 1.5 + 0.6) / 3, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(metrics["rollout_corr_mismatch_k1"], -np.log(RHO[0, :5]).mean(), rtol=1e-5, atol=1e-6)


def test_icepop_wider_band_keeps_more(run):
    _, keep, metrics = _correct(run, "icepop", bound=3.5)  # [0.286, 3.5] keeps 3.0 and 0.4 too
    assert np.asarray(keep)[0, :5].all()
    assert float(metrics["rollout_corr_token_masked_frac"]) == 0.0


def test_truncated_is_correction_matches_tis_weights(run):
    weights, keep, metrics = _correct(run, "tis", bound=2.0)
    want = np.minimum(RHO, 2.0)
    np.testing.assert_allclose(weights, want, rtol=1e-5, atol=1e-6)
    assert np.asarray(keep).all()
    np.testing.assert_allclose(metrics["rollout_corr_clipfrac"], 1 / 5, rtol=1e-6)  # only 3.0 is capped
    np.testing.assert_allclose(metrics["rollout_corr_weight_mean"], want[0, :5].mean(), rtol=1e-5, atol=1e-6)
    assert float(metrics["rollout_corr_token_masked_frac"]) == 0.0


def test_sequence_geometric_mask_drops_whole_rows(run):
    log_rho = np.array([[0.001, -0.001, 0.5], [0.02, 0.0, 0.0], [-0.005, -0.005, 0.0], [0.0, 0.0, 0.0]])
    mask = np.array([[1, 1, 0], [1, 1, 0], [1, 1, 0], [0, 0, 0]])
    old = np.full(log_rho.shape, -1.0)
    weights, keep, metrics = _correct(run, "seq_geo_mask", old=old, sampler=old - log_rho, mask=mask, bound=1.01)
    # geometric means exp(0) = 1 (the masked 0.5 does not count), exp(0.01) = 1.01005 > 1.01 (dropped),
    # exp(-0.005) = 0.995 > 1 / 1.01 = 0.990 (kept); the empty row has nothing to drop.
    np.testing.assert_array_equal(np.asarray(keep).all(axis=1), [True, False, True, True])
    np.testing.assert_array_equal(np.asarray(keep).any(axis=1), [True, False, True, True])
    assert np.all(np.asarray(weights) == 1.0)
    np.testing.assert_allclose(metrics["rollout_corr_seq_masked_frac"], 1 / 3, rtol=1e-6)
    np.testing.assert_allclose(metrics["rollout_corr_token_masked_frac"], 2 / 6, rtol=1e-6)


def test_sequence_geometric_mask_averages_unclamped_log_ratios(run):
    """The row statistic is the mean of the raw log rho (veRL clamps only the mean): clamping each token to +-20
    first turned log rho [25, -30] (geometric mean exp(-2.5)) into [20, -20] (mean 0) and kept the row."""
    log_rho = np.array([[25.0, -30.0], [25.0, 0.0], [0.0, 0.0]])
    old = np.full(log_rho.shape, -1.0)
    _, keep, metrics = _correct(run, "seq_geo_mask", old=old, sampler=old - log_rho, mask=np.ones((3, 2)), bound=2.0)
    # row means -2.5, 12.5 and 0: only the last lies in [log 1/2, log 2]
    np.testing.assert_array_equal(np.asarray(keep).all(axis=1), [False, False, True])
    np.testing.assert_allclose(metrics["rollout_corr_mismatch_k1"], -log_rho.mean(), rtol=1e-5, atol=1e-6)


def test_no_correction_is_the_identity(run):
    weights, keep, metrics = _correct(run, "none")
    assert np.all(np.asarray(weights) == 1.0) and np.asarray(keep).all() and metrics == {}


def test_default_bounds():
    assert algos.rollout_correction.DEFAULT_BOUNDS == {"tis": 2.0, "icepop": 2.0, "seq_geo_mask": 1.001, "decoupled": 5.0}
    weights, _, _ = _correct(lambda f, *a, **k: f(*a, **k), "tis")  # bound None -> 2.0
    np.testing.assert_allclose(weights, np.minimum(RHO, 2.0), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("name,bound", [("icepop", 1.0), ("seq_geo_mask", 0.5), ("tis", 0.0)])
def test_bad_bounds_fail_when_resolved(name, bound):
    with pytest.raises(ValueError, match="bound|> 0"):
        algos.resolve_rollout_correction(name, bound, policy_loss=algos.ppo_clip_loss, tis_cap=None)


def test_tis_cap_conflicts_are_named():
    with pytest.raises(ValueError, match="both correct the sampler mismatch"):
        algos.resolve_rollout_correction("icepop", None, policy_loss=algos.ppo_clip_loss, tis_cap=2.0)
    with pytest.raises(ValueError, match="PPO loss"):
        algos.resolve_rollout_correction("none", None, policy_loss=algos.cispo_loss, tis_cap=2.0)
    correct = algos.resolve_rollout_correction("none", None, policy_loss=algos.ppo_clip_loss, tis_cap=2.0)
    weights, keep, _ = correct(*[jnp.zeros((1, 2))] * 3)
    assert weights.shape == keep.shape == (1, 2)


def test_unknown_correction_lists_the_known_ones():
    with pytest.raises(KeyError, match="seq_geo_mask"):
        algos.resolve_rollout_correction("veto", None, policy_loss=algos.ppo_clip_loss, tis_cap=None)


def test_custom_correction_without_bound_keyword():
    @algos.ROLLOUT_CORRECTIONS.register("test_halve")
    def halve(old_logprobs, sampler_logprobs, response_mask):
        return jnp.full(response_mask.shape, 0.5), jnp.ones(response_mask.shape, bool), {}

    try:
        correct = algos.resolve_rollout_correction("test_halve", 3.0, policy_loss=algos.ppo_clip_loss,
                                                   tis_cap=None)
        weights, _, _ = correct(*[jnp.zeros((2, 3))] * 3)
        assert np.all(np.asarray(weights) == 0.5)
    finally:
        algos.ROLLOUT_CORRECTIONS.unregister("test_halve")


def test_a_correction_over_truncated_sampling_is_warned_about():
    """With top-p/top-k the sampler's log-probs are the truncated distribution's, so rho is the kept mass on every
    token: a correction would drop or down-weight tokens for the truncation itself."""
    from configs.base import get_base_config
    from ragen_jax.config.checks import truncated_sampling_warning

    cfg = get_base_config()
    assert truncated_sampling_warning(cfg) is None  # the defaults: no correction, no truncation
    cfg.algo.rollout_correction = "icepop"
    assert truncated_sampling_warning(cfg) is None  # a correction alone measures real drift
    cfg.rollout.top_p = 0.9
    warning = truncated_sampling_warning(cfg)
    assert "algo.rollout_correction='icepop' with rollout.top_p=0.9" in warning and "rollout.top_k=-1" in warning
    cfg.algo.rollout_correction, cfg.algo.tis_cap, cfg.rollout.top_p, cfg.rollout.top_k = "none", 2.0, 1.0, 20
    assert "algo.tis_cap=2.0 with rollout.top_k=20" in truncated_sampling_warning(cfg)
    cfg.rollout.top_k = -1  # off, as vLLM's default
    assert truncated_sampling_warning(cfg) is None


def test_decoupled_ppo_weights_by_the_behaviour_ratio_and_drops_tokens_above_the_cap(run):
    """AReaL's decoupled PPO: w_t = pi_prox / pi_behav (old / sampler here), tokens with w_t > cap leave the loss;
    small weights stay (unlike icepop's two-sided band)."""
    weights, keep, metrics = _correct(run, "decoupled", bound=2.0)
    np.testing.assert_array_equal(np.asarray(keep)[0, :5], [True, True, False, True, True])
    np.testing.assert_allclose(np.asarray(weights)[0, :5], [1.0, 1.5, 0.0, 0.4, 0.6], rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(metrics["rollout_corr_token_masked_frac"], 1 / 5, rtol=1e-6)
    _, keep, _ = _correct(run, "decoupled")  # AReaL's cap 5: only the 10x token (outside the mask) is over it
    assert np.asarray(keep)[0, :5].all() and not np.asarray(keep)[0, 5]
    with pytest.raises(ValueError, match="bound b must be > 1"):
        _correct(run, "decoupled", bound=0.5)


def test_decoupled_ppo_loss_is_the_written_out_formula():
    """The whole update's loss with the decoupled correction equals AReaL's objective written out: mean over tokens
    of w_t * max(-A r_t, -A clip(r_t, 1 - e, 1 + e)), r_t = pi_theta / pi_prox, w_t = pi_prox / pi_behav."""
    import jax

    theta = np.array([[-1.1, -1.9, -0.6, -2.8, -1.4, -2.0]], np.float32)
    adv = np.array([[1.0, -0.5, 2.0, 0.3, -1.0, 0.0]], np.float32)
    mask = MASK.astype(np.float32)
    weights, keep, _ = algos.ROLLOUT_CORRECTIONS.get("decoupled")(
        jnp.asarray(OLD, jnp.float32), jnp.asarray(SAMPLER, jnp.float32), jnp.asarray(mask), bound=2.0)
    pg, _ = algos.ppo_clip_loss(jnp.asarray(theta), jnp.asarray(OLD, jnp.float32), jnp.asarray(adv),
                                jnp.asarray(mask * np.asarray(keep)), clip_ratio_low=0.2, clip_ratio_high=0.2,
                                clip_ratio_c=None)
    m = mask * np.asarray(keep)
    got = float(jax.device_get((pg * weights * m).sum() / m.sum()))
    r = np.exp(theta - OLD)
    w = np.where(RHO <= 2.0, RHO, 0.0)
    want = (w * np.maximum(-adv * r, -adv * np.clip(r, 0.8, 1.2)) * m).sum() / m.sum()
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
