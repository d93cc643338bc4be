"""veRL's clip_cov, kl_cov, geo_mean (GMPO) and sapo losses: ours against veRL's own functions (their source from
the installed verl package, tests/verl_testlib.py) on the same random ragged batches, loss, metrics and gradient."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from ragen_jax import algos
from ragen_jax.algos.policy_loss import geo_mean_loss, policy_loss_denominator, sapo_loss, takes_rollout_weights
from verl_testlib import actor_config, core_algos

torch = pytest.importorskip("torch")
VERL = {"clip_cov": "compute_policy_loss_clip_cov", "kl_cov": "compute_policy_loss_kl_cov",
        "geo_mean": "compute_policy_loss_geo_mean", "sapo": "compute_policy_loss_sapo"}
B, T = 6, 9


def batch(seed: int, *, log_ratio_std: float = 0.3, per_token_adv: bool = False, empty_row: int | None = None):
    """Ragged rows (each with a token, but row `empty_row`), log pi ~ N(-2, 1.5), log pi_old = log pi + noise,
    float64 numpy."""
    rng = np.random.default_rng(seed)
    lengths = rng.integers(1, T + 1, B)
    if empty_row is not None:
        lengths[empty_row] = 0
    mask = (np.arange(T)[None, :] < lengths[:, None]).astype(np.float64)
    new = rng.normal(-2.0, 1.5, (B, T))
    old = new - rng.normal(0.0, log_ratio_std, (B, T))
    adv = rng.normal(0.0, 2.0, (B, T)) if per_token_adv else np.repeat(rng.normal(0.0, 2.0, (B, 1)), T, axis=1)
    adv[0, : lengths[0]] = 0.0 if per_token_adv else adv[0, : lengths[0]]  # A == 0 takes SAPO's negative tau
    return new, old, adv * mask, mask


def verl_loss(name: str, new, old, adv, mask, mode: str, weights=None, **config):
    """veRL's loss, metrics and d loss / d log pi in float64 (weights: its rollout_is_weights)."""
    fn = getattr(core_algos(*VERL.values()), VERL[name])
    logp = torch.tensor(new, requires_grad=True)
    is_weights = None if weights is None else torch.tensor(weights * mask)  # veRL zeroes them off the mask
    loss, metrics = fn(torch.tensor(old), logp, torch.tensor(adv), torch.tensor(mask), loss_agg_mode=mode,
                       config=actor_config(**config), rollout_is_weights=is_weights)
    loss.backward()
    return float(loss.detach()), {k.removeprefix("actor/"): v for k, v in metrics.items()}, logp.grad.numpy()


def our_loss(name: str, new, old, adv, mask, mode: str, weights=None, **hparams):
    """Ours as the trainer composes it: rollout weights to a loss that takes them, else times its per-token loss;
    the aggregated numerator over policy_loss_denominator."""
    f32 = lambda x: None if x is None else jnp.asarray(x, jnp.float32)  # noqa: E731
    step = _our_value_and_grad(name, mode, weights is not None, tuple(sorted(hparams.items())))
    (loss, metrics), grad = step(f32(new), f32(old), f32(adv), f32(mask), f32(weights))
    return float(loss), {k: float(v) for k, v in metrics.items()}, np.asarray(grad)


@functools.cache
def _our_value_and_grad(name: str, mode: str, weighted: bool, hparams: tuple):
    """One compiled (loss, metrics), d loss / d log pi per configuration: the tests' seeds share it."""
    fn = algos.POLICY_LOSSES.get(name)
    itself = weighted and takes_rollout_weights(fn)

    def total(logprobs, old, adv, mask, weights):
        kw = dict(hparams, rollout_weights=weights) if itself else dict(hparams)
        loss, metrics = fn(logprobs, old, adv, mask, **kw)
        loss = loss * weights if weighted and not itself else loss
        return algos.agg_numerator(loss, mask, mode) / policy_loss_denominator(fn, mask, mode), metrics

    return jax.jit(jax.value_and_grad(total, has_aux=True))


def assert_parity(ours, theirs):
    (loss, metrics, grad), (v_loss, v_metrics, v_grad) = ours, theirs
    np.testing.assert_allclose(loss, v_loss, rtol=1e-5, atol=1e-6)
    assert set(v_metrics) <= set(metrics)
    for key, value in v_metrics.items():
        np.testing.assert_allclose(metrics[key], value, rtol=1e-5, atol=1e-6, err_msg=key)
    np.testing.assert_allclose(grad, v_grad, rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("ratio", [1.0])
def test_clip_cov_matches_verl_when_its_random_pick_takes_every_eligible_token(seed, ratio):
    """With clip_cov_ratio 1 veRL's random draw takes every token in the band: no randomness left, the same
    tokens lose their gradient."""
    new, old, adv, mask = batch(seed)
    clip = dict(clip_ratio_low=0.2, clip_ratio_high=0.28)
    band = dict(clip_cov_ratio=ratio, clip_cov_lb=0.5, clip_cov_ub=5.0)
    ours = our_loss("clip_cov", new, old, adv, mask, "token-mean", **clip, **band)
    assert_parity(ours, verl_loss("clip_cov", new, old, adv, mask, "token-mean", **clip, **band))
    assert ours[1]["pg_clipfrac"] > 0  # some tokens were detached


@pytest.mark.parametrize("seed", range(4))
def test_clip_cov_detaches_the_highest_covariances_where_verl_draws_at_random(seed):
    """Fewer slots than eligible tokens: veRL draws them at random, we take the highest covariances; the same
    count, and the same loss as veRL's when its band holds just the tokens we took."""
    new, old, adv, mask = batch(seed)
    n = int(mask.sum())
    ours = our_loss("clip_cov", new, old, adv, mask, "token-mean", clip_ratio_low=0.2, clip_ratio_high=0.28,
                    clip_cov_ratio=2.5 / n, clip_cov_lb=0.0, clip_cov_ub=50.0)
    assert ours[1]["pg_clipfrac"] == pytest.approx(2 / n)  # max(int(ratio * n), 1) = 2 tokens
    # the tokens veRL could pick in the wide band, their covariance: ours are the two largest
    ratio = np.exp(new - old)
    clipped = -adv * np.clip(ratio, 0.8, 1.28) > -adv * ratio
    cov = (adv - adv[mask > 0].mean()) * (new - new[mask > 0].mean())
    eligible = np.sort(cov[(mask > 0) & ~clipped & (cov > 0.0) & (cov < 50.0)])
    assert eligible.size > 2
    narrow = dict(clip_cov_ratio=2.5 / n, clip_cov_lb=(eligible[-3] + eligible[-2]) / 2, clip_cov_ub=50.0)
    assert_parity(ours, verl_loss("clip_cov", new, old, adv, mask, "token-mean", clip_ratio_low=0.2,
                                  clip_ratio_high=0.28, **narrow))


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("ratio,coef", [(0.0002, 0.1), (0.1, 0.1), (0.3, 1.5)])
def test_kl_cov_matches_verl(seed, ratio, coef):
    new, old, adv, mask = batch(seed, per_token_adv=seed % 2 == 1)
    hp = dict(kl_cov_ratio=ratio, ppo_kl_coef=coef)
    assert_parity(our_loss("kl_cov", new, old, adv, mask, "token-mean", **hp),
                  verl_loss("kl_cov", new, old, adv, mask, "token-mean", **hp))


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("low,high", [(0.2, 0.28), (0.4, 0.4)])
def test_geo_mean_matches_verl(seed, low, high):
    """veRL's geo_mean ignores loss_agg_mode (a mean over rows): ours under seq-mean-token-mean, the mode it needs."""
    new, old, adv, mask = batch(seed, log_ratio_std=0.6, per_token_adv=seed % 2 == 1)
    ours = our_loss("geo_mean", new, old, adv, mask, "seq-mean-token-mean", clip_ratio_low=low, clip_ratio_high=high)
    assert ours[1]["pg_clipfrac"] > 0 and ours[1]["pg_clipfrac_lower"] > 0
    assert_parity(ours, verl_loss("geo_mean", new, old, adv, mask, "token-mean", clip_ratio_low=low,
                                  clip_ratio_high=high))


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("tau_pos,tau_neg", [(1.0, 1.05), (0.5, 2.0)])
def test_sapo_matches_verl(seed, tau_pos, tau_neg):
    """veRL's sapo aggregates seq-mean-token-mean whatever loss_agg_mode says: ours under that mode."""
    new, old, adv, mask = batch(seed, log_ratio_std=1.0, per_token_adv=True)
    taus = dict(tau_pos=tau_pos, tau_neg=tau_neg)
    assert_parity(our_loss("sapo", new, old, adv, mask, "seq-mean-token-mean", **taus),
                  verl_loss("sapo", new, old, adv, mask, "token-mean", **taus))


@pytest.mark.parametrize("name,bad,match", [
    ("clip_cov", dict(clip_cov_ratio=0.0), "clip_cov_ratio must be in"),
    ("clip_cov", dict(clip_cov_lb=5.0, clip_cov_ub=1.0), "clip_cov_lb .* must be below clip_cov_ub"),
    ("kl_cov", dict(kl_cov_ratio=1.5), "kl_cov_ratio must be in"),
    ("kl_cov", dict(ppo_kl_coef=-1.0), "ppo_kl_coef must be >= 0"),
    ("sapo", dict(tau_neg=0.0), "tau_pos and tau_neg must be > 0"),
])
def test_out_of_range_hyper_parameters_name_themselves(name, bad, match):
    x = jnp.zeros((2, 3))
    with pytest.raises(ValueError, match=match):
        algos.POLICY_LOSSES.get(name)(x, x, x, jnp.ones((2, 3)), **bad)


def test_losses_that_average_sequences_refuse_another_aggregation():
    from ragen_jax.algos.policy_loss import required_agg_mode_problem

    for name in ("geo_mean", "sapo"):
        fn = algos.POLICY_LOSSES.get(name)
        assert required_agg_mode_problem(fn, "seq-mean-token-mean") is None
        assert "loss_agg_mode='seq-mean-token-mean'" in required_agg_mode_problem(fn, "token-mean")
    assert required_agg_mode_problem(algos.POLICY_LOSSES.get("clip_cov"), "token-mean") is None


def weights_for(seed: int, mask):
    """Rollout-correction weights as a correction makes them: positive (IS ratios, some far from 1)."""
    return np.exp(np.random.default_rng(seed + 100).normal(0.0, 0.7, mask.shape))


# the configurations of the parity tests above, for the empty-row and rollout-weight cases
SETUPS = {"geo_mean": (dict(log_ratio_std=0.6), "seq-mean-token-mean", dict(clip_ratio_low=0.2, clip_ratio_high=0.28)),
          "sapo": (dict(log_ratio_std=1.0, per_token_adv=True), "seq-mean-token-mean", dict(tau_pos=0.5, tau_neg=2.0)),
          "kl_cov": (dict(), "seq-mean-token-mean", dict(kl_cov_ratio=0.1, ppo_kl_coef=0.1)),
          "clip_cov": (dict(), "token-mean", dict(clip_ratio_low=0.2, clip_ratio_high=0.28, clip_cov_ratio=1.0,
                                                  clip_cov_lb=0.5, clip_cov_ub=5.0))}


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("name", sorted(SETUPS))
@pytest.mark.parametrize("empty,weighted", [(True, False), (False, True), (True, True)])
def test_empty_rows_and_rollout_weights_match_verl(name, seed, empty, weighted):
    """A row with no tokens (veRL's geo_mean still counts it in its mean over rows, sapo's seq-mean does not) and
    rollout-correction weights (veRL's geo_mean scales a row by their geometric mean, the others each token)."""
    kw, mode, hp = SETUPS[name]
    new, old, adv, mask = batch(seed, empty_row=2 if empty else None, **kw)
    weights = weights_for(seed, mask) if weighted else None
    verl_mode = "token-mean" if name in ("geo_mean", "sapo") else mode  # both ignore it
    assert_parity(our_loss(name, new, old, adv, mask, mode, weights, **hp),
                  verl_loss(name, new, old, adv, mask, verl_mode, weights, **hp))


def test_sapo_on_rows_all_empty_verl_divides_0_by_0_ours_is_a_finite_zero():
    """No global batch info: veRL's seq-mean divides by its 0 non-empty rows, a NaN loss (its masked_sum's
    torch.where keeps the gradient 0); the intentional difference docs/custom_losses.md lists. Ours, divided as
    the trainer divides (steps.loss_denominators), is 0 with a zero gradient in either loss scope."""
    from ragen_jax.trainer.steps import loss_denominators

    new, old, adv, _ = batch(0, per_token_adv=True)
    mask = np.zeros((B, T))
    v_loss, _, v_grad = verl_loss("sapo", new, old, adv, mask, "token-mean")
    assert np.isnan(v_loss) and not np.any(v_grad)
    f32 = lambda x: jnp.asarray(x, jnp.float32)  # noqa: E731
    for scope in ("mini_batch", "micro_batch"):
        def total(logprobs, scope=scope):
            loss, _ = sapo_loss(logprobs, f32(old), f32(adv), f32(mask))
            num = algos.agg_numerator(loss, f32(mask), "seq-mean-token-mean")
            den = loss_denominators(f32(mask), "seq-mean-token-mean", scope, B,
                                    denominator=lambda m, rows: policy_loss_denominator(sapo_loss, m,
                                                                                        "seq-mean-token-mean", rows))
            return num / den[0]

        loss, grad = jax.jit(jax.value_and_grad(total))(f32(new))
        assert float(loss) == 0.0 and not np.any(np.asarray(grad)), scope


def micro_scope_loss(name: str, new, old, adv, mask, micro: int, **hparams):
    """Ours as the trainer divides under loss_scope="micro_batch": each micro-batch's numerator over its
    steps.loss_denominators entry, summed; -> (loss, d loss / d log pi)."""
    from ragen_jax.trainer.steps import loss_denominators

    f32 = lambda x: jnp.asarray(x, jnp.float32)  # noqa: E731
    fn = algos.POLICY_LOSSES.get(name)
    mode = "seq-mean-token-mean"
    den = loss_denominators(f32(mask), mode, "micro_batch", micro,
                            denominator=lambda m, rows: policy_loss_denominator(fn, m, mode, rows),
                            all_rows=name == "geo_mean")

    def total(logprobs):
        loss, _ = fn(logprobs, f32(old), f32(adv), f32(mask), **hparams)
        nums = [algos.agg_numerator(loss[i:i + micro], f32(mask[i:i + micro]), mode) for i in range(0, B, micro)]
        return sum(n / d for n, d in zip(nums, den))

    loss, grad = jax.jit(jax.value_and_grad(total))(f32(new))  # one program, not an eager dispatch per op
    return float(loss), np.asarray(grad)


@pytest.mark.parametrize("seed", range(3))
def test_geo_mean_under_micro_batch_scope_counts_an_all_empty_micro_batch_as_verl(seed):
    """veRL scales each micro-batch's geo_mean by 1 / gradient_accumulation, every micro-batch counted: one whose
    rows are all empty (here rows 2-3) adds 0 and still counts. Ours multiplied by the micro-batches with tokens
    (2 here, not 3), a loss and gradient 3/2 of veRL's."""
    micro = 2
    new, old, adv, mask = batch(seed, log_ratio_std=0.6)
    mask[2:4] = 0.0
    adv = adv * mask
    hp = dict(clip_ratio_low=0.2, clip_ratio_high=0.28)
    n_micro = B // micro
    v_loss, v_grad = 0.0, np.zeros_like(new)
    for i in range(0, B, micro):
        part = slice(i, i + micro)
        loss, _, grad = verl_loss("geo_mean", new[part], old[part], adv[part], mask[part], "token-mean", **hp)
        v_loss += loss / n_micro
        v_grad[part] = grad / n_micro
    loss, grad = micro_scope_loss("geo_mean", new, old, adv, mask, micro, **hp)
    np.testing.assert_allclose(loss, v_loss, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(grad, v_grad, rtol=1e-4, atol=1e-6)


# --- veRL-free checks of the same (hand-computed), so they run where veRL is not installed --------------------


def test_geo_mean_counts_every_row_empty_ones_too_but_not_padding():
    """Row 0: log r = 0, A = 1 -> loss -1; row 1 empty. veRL's torch.mean over rows: -1 / 2."""
    zeros, mask = jnp.zeros((2, 3)), jnp.array([[1.0, 1.0, 0.0], [0.0, 0.0, 0.0]])
    loss, _ = geo_mean_loss(zeros, zeros, mask, mask)
    num = algos.agg_numerator(loss, mask, "seq-mean-token-mean")
    assert float(num / policy_loss_denominator(geo_mean_loss, mask, "seq-mean-token-mean")) == pytest.approx(-0.5)
    assert float(policy_loss_denominator(geo_mean_loss, mask, "seq-mean-token-mean", jnp.array([1.0, 0.0]))) == 1.0
    assert float(policy_loss_denominator(sapo_loss, mask, "seq-mean-token-mean")) == 1.0  # its seq-mean skips it


def test_geo_mean_scales_a_row_by_the_geometric_mean_of_its_rollout_weights():
    """Weights [1, 4] on a row with log r = 0, A = 1: geometric mean 2 (loss -2), not the arithmetic 2.5."""
    zeros, mask = jnp.zeros((1, 2)), jnp.ones((1, 2))
    loss, _ = geo_mean_loss(zeros, zeros, mask, mask, rollout_weights=jnp.array([[1.0, 4.0]]))
    np.testing.assert_allclose(np.asarray(loss), [[-2.0, -2.0]], rtol=1e-6)
    assert takes_rollout_weights(geo_mean_loss) and not takes_rollout_weights(sapo_loss)


def test_geo_mean_micro_scope_counts_an_empty_micro_batch_but_not_a_padding_one():
    """Two micro-batches of one row: row 0 log r = 0, A = 1 (loss -1), row 1 empty. veRL: (-1 + 0) / 2. A
    padding row (row_valid 0) is no micro-batch veRL has (RAGEN pads with real rows): it does not count."""
    from ragen_jax.trainer.steps import loss_denominators, micro_batches_counted

    zeros, mask = jnp.zeros((2, 3)), jnp.array([[1.0, 1.0, 0.0], [0.0, 0.0, 0.0]])
    loss, _ = geo_mean_loss(zeros, zeros, mask, mask)
    mode = "seq-mean-token-mean"
    num = algos.agg_numerator(loss[:1], mask[:1], mode)

    def denominators(row_valid):
        return loss_denominators(mask, mode, "micro_batch", 1, row_valid=row_valid, all_rows=True,
                                 denominator=lambda m, rows: policy_loss_denominator(geo_mean_loss, m, mode, rows))

    assert float(num / denominators(None)[0]) == pytest.approx(-0.5)
    assert float(num / denominators(jnp.array([1.0, 0.0]))[0]) == pytest.approx(-1.0)
    assert float(micro_batches_counted(mask, jnp.ones(2), 1)) == 1.0  # other losses: the micro-batches with tokens
    assert float(micro_batches_counted(mask, jnp.ones(2), 1, all_rows=True)) == 2.0
