"""The new policy losses and rollout corrections inside the trainer's actor update (make_step_fns): exact
under the micro-batch split, corrections composing with every policy loss, and the :gspo / :cispo configs."""

import dataclasses
import functools

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from flax import nnx

from configs import bandit, sokoban
from ragen_jax import algos
from ragen_jax.config import validate_config
from ragen_jax.algos.settings import AlgoSettings
from ragen_jax.trainer.steps import make_step_fns

VOCAB, DIM, ROWS, T = 32, 8, 8, 10


class BigramLM(nnx.Module):
    """The smallest module with CausalLM's hidden / lm_head_matrix interface (fast to compile)."""

    def __init__(self, rngs: nnx.Rngs):
        self.embed = nnx.Embed(VOCAB, DIM, rngs=rngs)
        self.head = nnx.Param(jax.random.normal(rngs.params(), (DIM, VOCAB)))

    def hidden(self, tokens, positions, *, attention_mask=None, hidden_at=None):
        h = jnp.tanh(self.embed(tokens))
        return (h if hidden_at is None else jnp.take_along_axis(h, hidden_at[..., None], axis=1)), None

    def lm_head_matrix(self):
        return self.head[...]


BASE = AlgoSettings(
    adv_estimator="grpo", policy_loss="vanilla", value_loss="clipped", loss_agg_mode="token-mean", gamma=1.0,
    lam=1.0, high_level_gamma=0.95, norm_adv_by_std_in_grpo=True, clip_ratio_low=0.02, clip_ratio_high=0.02,
    clip_ratio_c=3.0, cliprange_value=0.5, entropy_coeff=0.01, use_kl_loss=False, kl_loss_coef=0.0,
    kl_loss_type="kl", tis_cap=None, temperature=1.0, logprob_chunk=4)
TX = optax.sgd(1.0)
# rows 0 and 3 hold one far-off token each (|log rho| = 1 > log 2); rows 2 and 5 are shifted by 0.02 (their
# geometric mean leaves [1/1.01, 1.01]); the other tokens differ by about 0.003.
OUTLIERS = {(0, 4): 1.0, (3, 6): -1.0}
SHIFTED_ROWS = (2, 5)


def split_actor():
    graphdef, trainable, frozen = nnx.split(BigramLM(nnx.Rngs(0)), nnx.Param, ...)
    return graphdef, trainable, frozen


@functools.cache
def _batch() -> dict[str, np.ndarray]:
    graphdef, trainable, frozen = split_actor()
    rng = np.random.default_rng(0)
    lengths = np.array([10, 9, 8, 10, 7, 10, 6, 9])
    attention = (np.arange(T)[None, :] < lengths[:, None]).astype(np.int32)
    loss_mask = (attention * (np.arange(T)[None, :] >= 3)).astype(np.float32)
    tokens = (rng.integers(0, VOCAB, (ROWS, T)) * attention).astype(np.int32)
    score = make_step_fns(graphdef, None, BASE, TX, None, ROWS)["score_policy"]
    model_lp = np.asarray(score(trainable, frozen, tokens, attention)[0])
    old = (model_lp + rng.normal(0.0, 0.03, (ROWS, T))) * loss_mask
    log_rho = rng.normal(0.0, 0.003, (ROWS, T))
    log_rho[list(SHIFTED_ROWS)] += 0.02
    for pos, value in OUTLIERS.items():
        log_rho[pos] = value
    return dict(tokens=tokens, attention_mask=attention, loss_mask=loss_mask,
                old_logprobs=old.astype(np.float32), sample_logprobs=((old - log_rho) * loss_mask).astype(np.float32),
                advantages=(rng.normal(size=(ROWS, 1)) * loss_mask).astype(np.float32))


def make_batch() -> dict[str, np.ndarray]:
    """Right-padded rows, a prompt of 3 tokens, old log-probs near the model's own, a sampler near those."""
    return {k: v.copy() for k, v in _batch().items()}


def update(algo: AlgoSettings, batch: dict, micro: int = ROWS):
    """One SGD(1) actor update -> (flat parameter change, metrics)."""
    graphdef, trainable, frozen = split_actor()
    before = [np.asarray(x) for x in jax.tree.leaves(trainable)]
    fns = make_step_fns(graphdef, None, algo, TX, None, micro)
    new, _, metrics = fns["actor_update"](trainable, TX.init(trainable), frozen,
                                          {k: jnp.asarray(v) for k, v in batch.items()})
    delta = np.concatenate([(np.asarray(a) - b).ravel() for a, b in zip(jax.tree.leaves(new), before)])
    return delta, {k: float(v) for k, v in metrics.items()}


def assert_same_update(a, b):
    np.testing.assert_allclose(a, b, rtol=1e-4, atol=3e-7)  # 2.5 float32 ulps of a weight of 1.0 (a norm scale)
    assert np.abs(a).max() > 1e-4  # a real update, not two zeros


@pytest.mark.parametrize("loss,mode,correction", [
    ("gspo", "seq-mean-token-mean", "seq_geo_mask"),
    ("gspo_token", "token-mean", "icepop"),
    ("cispo", "seq-mean-token-sum", "tis"),
    ("gspo", "seq-mean-token-sum-norm", "none"),
    ("geo_mean", "seq-mean-token-mean", "icepop"),  # row-local, as GSPO
    ("sapo", "seq-mean-token-mean", "seq_geo_mask"),  # token-local
])
@pytest.mark.slow  # default run: too long for CI's 15 minutes on 2 cores
def test_micro_batches_give_the_full_batch_update(loss, mode, correction):
    algo = dataclasses.replace(BASE, policy_loss=loss, loss_agg_mode=mode, rollout_correction=correction,
                               rollout_correction_bound=1.01 if correction == "seq_geo_mask" else None)
    batch = make_batch()
    full, full_metrics = update(algo, batch, micro=ROWS)
    split, split_metrics = update(algo, batch, micro=ROWS // 4)
    assert_same_update(split, full)
    np.testing.assert_allclose(split_metrics["loss"], full_metrics["loss"], rtol=1e-5, atol=1e-6)


def drop(batch: dict, keep: np.ndarray) -> dict:
    return dict(batch, loss_mask=batch["loss_mask"] * keep)


@pytest.mark.slow  # default run: too long for CI's 15 minutes on 2 cores
@pytest.mark.parametrize("loss", ["vanilla", "reinforce", "gspo", "gspo_token", "cispo"])
def test_sequence_mask_is_dropping_those_rows_by_hand(loss):
    batch = make_batch()
    algo = dataclasses.replace(BASE, policy_loss=loss)
    masked, metrics = update(dataclasses.replace(algo, rollout_correction="seq_geo_mask",
                                                 rollout_correction_bound=1.01), batch)
    dropped_rows = [0, 2, 3, 5]  # the shifted rows, and the rows whose outlier moves their mean by 1/7 or 1/5
    keep = np.ones((ROWS, 1), np.float32)
    keep[dropped_rows] = 0.0
    by_hand, _ = update(algo, drop(batch, keep))
    assert_same_update(masked, by_hand)  # dropped tokens leave the loss and its denominator
    if loss == "vanilla":
        assert not np.allclose(masked, update(algo, batch)[0], rtol=1e-3)
    np.testing.assert_allclose(metrics["rollout_corr_seq_masked_frac"], len(dropped_rows) / ROWS, rtol=1e-6)


@pytest.mark.slow  # default run: too long for CI's 15 minutes on 2 cores
def test_icepop_is_truncated_is_on_the_tokens_it_keeps():
    batch = make_batch()
    algo = dataclasses.replace(BASE, policy_loss="gspo", loss_agg_mode="seq-mean-token-mean")
    icepop, metrics = update(dataclasses.replace(algo, rollout_correction="icepop", rollout_correction_bound=2.0),
                             batch)
    keep = np.ones((ROWS, T), np.float32)
    for pos in OUTLIERS:
        keep[pos] = 0.0
    # inside the band rho <= 2, so min(rho, 2) = rho: the same weights on the same tokens
    by_hand, _ = update(dataclasses.replace(algo, rollout_correction="tis", rollout_correction_bound=2.0),
                        drop(batch, keep))
    assert_same_update(icepop, by_hand)
    np.testing.assert_allclose(metrics["rollout_corr_token_masked_frac"],
                               len(OUTLIERS) / batch["loss_mask"].sum(), rtol=1e-6)


@pytest.mark.slow  # default run: too long for CI's 15 minutes on 2 cores
def test_tis_correction_equals_tis_cap_in_the_ppo_loss():
    batch = make_batch()
    corrected, metrics = update(dataclasses.replace(BASE, rollout_correction="tis", rollout_correction_bound=1.002),
                                batch)
    capped, cap_metrics = update(dataclasses.replace(BASE, tis_cap=1.002), batch)
    assert_same_update(corrected, capped)
    assert not np.allclose(corrected, update(BASE, batch)[0], rtol=1e-3)
    np.testing.assert_allclose(metrics["rollout_corr_clipfrac"], cap_metrics["tis_clipfrac"], rtol=1e-5)
    with pytest.raises(ValueError, match="both correct"):
        make_step_fns(*split_actor()[:1], None, dataclasses.replace(BASE, tis_cap=2.0, rollout_correction="tis"),
                      TX, None, ROWS)


@pytest.mark.parametrize("preset,loss,agg,clip", [
    ("gspo", "gspo", "seq-mean-token-mean", (3e-4, 4e-4)),
    ("cispo", "cispo", "token-mean", (1.0, 5.0)),
])
@pytest.mark.slow  # default run: too long for CI's 15 minutes on 2 cores
def test_preset_configs_validate_and_build(preset, loss, agg, clip):
    for cfg in (bandit.get_config(f"tiny,{preset}"), sokoban.get_config(preset)):
        validate_config(cfg)
        assert cfg.algo.preset == preset
        settings = AlgoSettings.of(validate_config(cfg))
        assert (settings.policy_loss, settings.loss_agg_mode, settings.adv_estimator) == (loss, agg, "grpo")
        assert (settings.clip_ratio_low, settings.clip_ratio_high) == clip
        assert settings.rollout_correction == "none" and settings.rollout_correction_bound is None
    cfg.algo.rollout_correction, cfg.algo.rollout_correction_bound = "icepop", 1.5
    validate_config(cfg)
    algo = dataclasses.replace(AlgoSettings.of(validate_config(cfg)), logprob_chunk=4)
    assert algo.rollout_correction_bound == 1.5
    delta, metrics = update(algo, make_batch())
    assert np.isfinite(delta).all() and metrics["update_skipped"] == 0.0 and "rollout_corr_weight_mean" in metrics
    cfg.algo.rollout_correction = "icepop_typo"
    with pytest.raises(ValueError, match="rollout_correction"):
        validate_config(cfg)


@pytest.mark.parametrize("loss,mode,hparams", [
    ("clip_cov", "token-mean", dict(clip_cov_ratio=0.2, clip_cov_lb=0.0, clip_cov_ub=50.0)),
    ("kl_cov", "token-mean", dict(kl_cov_ratio=0.2, ppo_kl_coef=1.0)),
    ("geo_mean", "seq-mean-token-mean", dict(clip_ratio_low=0.4, clip_ratio_high=0.4)),
    ("sapo", "seq-mean-token-mean", dict(tau_pos=1.0, tau_neg=1.05)),
])
@pytest.mark.slow  # default run: too long for CI's 15 minutes on 2 cores
def test_verl_losses_train_in_the_actor_update(loss, mode, hparams):
    """veRL's clip_cov / kl_cov / geo_mean / sapo, selected by name with veRL's keys, run one actor update, and
    their keys reach them (a penalty on more tokens, a detached token, other temperatures move the update)."""
    algo = dataclasses.replace(BASE, policy_loss=loss, loss_agg_mode=mode, **hparams)
    delta, metrics = update(algo, make_batch())
    assert np.isfinite(delta).all() and np.abs(delta).max() > 1e-4 and metrics["update_skipped"] == 0.0
    assert np.isfinite(metrics["ppo_kl"]) and np.isfinite(metrics["pg_loss"])
    moved = {"clip_cov": dict(clip_cov_ratio=1.0), "kl_cov": dict(ppo_kl_coef=50.0),
             "geo_mean": dict(clip_ratio_low=0.001, clip_ratio_high=0.001), "sapo": dict(tau_pos=5.0, tau_neg=5.0)}
    other, _ = update(dataclasses.replace(algo, **moved[loss]), make_batch())
    assert not np.allclose(other, delta, rtol=1e-3)


def test_sequence_mean_losses_refuse_another_aggregation_in_the_trainer():
    with pytest.raises(ValueError, match="'sapo' is a mean over sequences.*loss_agg_mode='seq-mean-token-mean'"):
        make_step_fns(*split_actor()[:1], None, dataclasses.replace(BASE, policy_loss="sapo"), TX, None, ROWS)


@pytest.mark.slow  # default run: too long for CI's 15 minutes on 2 cores
@pytest.mark.parametrize("preset,loss,clip", [("gmpo", "geo_mean", (0.4, 0.4)), ("sapo", "sapo", (0.2, 0.28))])
def test_gmpo_and_sapo_presets_validate_and_train(preset, loss, clip):
    cfg = bandit.get_config(f"tiny,{preset}")
    validate_config(cfg)
    settings = AlgoSettings.of(validate_config(cfg))
    assert (settings.policy_loss, settings.loss_agg_mode, settings.adv_estimator) == (loss, "seq-mean-token-mean",
                                                                                      "grpo")
    assert (settings.clip_ratio_low, settings.clip_ratio_high) == clip
    assert (settings.tau_pos, settings.tau_neg, settings.kl_cov_ratio) == (1.0, 1.05, 0.0002)  # veRL's defaults
    delta, metrics = update(dataclasses.replace(settings, logprob_chunk=4), make_batch())
    assert np.isfinite(delta).all() and metrics["update_skipped"] == 0.0
    cfg.algo.loss_agg_mode = "token-mean"
    with pytest.raises(ValueError, match="needs loss_agg_mode='seq-mean-token-mean'"):
        validate_config(cfg)


@pytest.mark.parametrize("loss", ["clip_cov", "kl_cov"])
def test_verl_loss_keys_are_config_keys(loss):
    """config.algo.clip_cov_ratio / kl_cov_ratio / ... reach the loss (veRL's actor.policy_loss.* names); out of
    range they stop the run by name."""
    cfg = bandit.get_config("tiny,grpo")
    cfg.algo.policy_loss = loss
    cfg.algo.clip_cov_ratio, cfg.algo.kl_cov_ratio, cfg.algo.ppo_kl_coef = 0.01, 0.02, 0.5
    validate_config(cfg)
    settings = AlgoSettings.of(validate_config(cfg))
    assert (settings.clip_cov_ratio, settings.kl_cov_ratio, settings.ppo_kl_coef) == (0.01, 0.02, 0.5)
    cfg.algo.kl_cov_ratio, cfg.algo.clip_cov_lb = 0.0, 9.0
    with pytest.raises(ValueError, match=r"kl_cov_ratio must be in \(0, 1\].*|clip_cov_lb \(9.0\) must be below"):
        validate_config(cfg)
    cfg.algo.kwargs = '{"ppo_kl_coef": 2.0}'
    with pytest.raises(ValueError, match="'ppo_kl_coef' is a keyword the trainer sets itself"):
        validate_config(cfg)


GMPO = dataclasses.replace(BASE, policy_loss="geo_mean", loss_agg_mode="seq-mean-token-mean", clip_ratio_low=0.4,
                           clip_ratio_high=0.4)


@pytest.mark.slow  # default run: too long for CI's 15 minutes on 2 cores
@pytest.mark.parametrize("micro", [ROWS, ROWS // 2])
def test_geo_mean_update_counts_an_empty_row_but_not_a_padding_row(micro):
    """veRL's geo_mean is a torch.mean over the rows: an empty response (here row 1) counts, a padding row
    (row_valid 0) does not; entropy's seq-mean skips both, as veRL's agg_loss."""
    batch = make_batch()
    batch["loss_mask"][1] = 0.0
    batch["advantages"][1] = 0.0
    padded = update(GMPO, dict(batch, row_valid=(np.arange(ROWS) != 1).astype(np.float32)), micro)
    metrics = update(GMPO, dict(batch, row_valid=np.ones(ROWS, np.float32)), micro)[1]
    no_key = update(GMPO, batch, micro)[1]
    assert metrics["pg_loss"] == pytest.approx(no_key["pg_loss"], rel=1e-5, abs=1e-6)  # no row_valid: every row is real
    assert metrics["pg_loss"] * ROWS == pytest.approx(padded[1]["pg_loss"] * (ROWS - 1), rel=1e-5, abs=1e-5)
    assert metrics["entropy_loss"] == pytest.approx(padded[1]["entropy_loss"], rel=1e-5, abs=1e-6)


@pytest.mark.slow  # default run: too long for CI's 15 minutes on 2 cores
@pytest.mark.parametrize("padding", [False, True])
def test_geo_mean_micro_batch_scope_counts_an_all_empty_micro_batch_as_verl(padding):
    """loss_scope="micro_batch": veRL scales each micro-batch's geo_mean (a mean over its rows) by
    1 / gradient_accumulation, so a micro-batch of empty rows (rows 2-3) adds 0 and counts; with equal micro-batches
    that is the mini-batch's mean over rows. Ours counted only micro-batches with tokens (3 of 4: a loss 4/3 of
    veRL's). A micro-batch of padding rows (row_valid 0; RAGEN pads with real rows) counts for nothing."""
    batch = make_batch()
    batch["loss_mask"][2:4] = 0.0
    batch["advantages"][2:4] = 0.0
    batch["row_valid"] = (~np.isin(np.arange(ROWS), [2, 3]) if padding else np.ones(ROWS)).astype(np.float32)
    micro = dataclasses.replace(GMPO, loss_scope="micro_batch")
    delta, metrics = update(micro, batch, ROWS // 4)
    want_delta, want = update(GMPO, batch, ROWS // 4)
    assert metrics["pg_loss"] == pytest.approx(want["pg_loss"], rel=1e-5, abs=1e-6)
    assert_same_update(delta, want_delta)


@pytest.mark.slow  # default run: too long for CI's 15 minutes on 2 cores
def test_geo_mean_update_weighs_a_row_by_the_geometric_mean_of_its_rollout_weights():
    """Under a rollout correction the update's geo_mean loss is the loss's own with the weights handed to it
    (each row times their geometric mean), not the per-token loss times them (their arithmetic mean)."""
    from ragen_jax.algos.policy_loss import geo_mean_loss, truncated_is_weights

    batch = make_batch()
    algo = dataclasses.replace(GMPO, rollout_correction="tis", rollout_correction_bound=10.0)
    graphdef, trainable, frozen = split_actor()
    score = make_step_fns(graphdef, None, BASE, TX, None, ROWS)["score_policy"]
    logprobs = score(trainable, frozen, batch["tokens"], batch["attention_mask"])[0]
    weights = truncated_is_weights(batch["old_logprobs"], batch["sample_logprobs"], 10.0)
    mask = batch["loss_mask"]
    args = (logprobs, batch["old_logprobs"], batch["advantages"], mask)
    loss = geo_mean_loss(*args, clip_ratio_low=0.4, clip_ratio_high=0.4, rollout_weights=weights)[0]
    unweighted = geo_mean_loss(*args, clip_ratio_low=0.4, clip_ratio_high=0.4)[0]
    arithmetic = algos.agg_numerator(unweighted * weights, mask, "seq-mean-token-mean") / ROWS
    expected = algos.agg_numerator(loss, mask, "seq-mean-token-mean") / ROWS
    assert abs(float(expected) - float(arithmetic)) > 1e-4  # the outlier rows' weights tell them apart
    assert update(algo, batch)[1]["pg_loss"] == pytest.approx(float(expected), rel=1e-5, abs=1e-6)


@pytest.mark.slow  # default run: too long for CI's 15 minutes on 2 cores
@pytest.mark.parametrize("scope", ["mini_batch", "micro_batch"])
def test_sapo_on_micro_batches_of_empty_rows_is_a_zero_loss_and_no_update(scope):
    """veRL's sapo divides 0 by 0 rows on a micro-batch whose rows are all empty (without global batch info): NaN.
    Here such a micro-batch adds a finite 0 and no gradient: a mini-batch of them leaves the policy as it is, and
    one beside a micro-batch with tokens leaves that one's update (micro_batch scope: its mean counts only it)."""
    algo = dataclasses.replace(BASE, policy_loss="sapo", loss_agg_mode="seq-mean-token-mean", loss_scope=scope)
    empty = make_batch()
    empty["loss_mask"][:] = 0.0
    delta, metrics = update(algo, empty, micro=4)
    assert metrics["update_skipped"] == 0.0 and metrics["pg_loss"] == 0.0 and metrics["ppo_kl"] == 0.0
    assert not np.any(delta)
    half = make_batch()
    half["loss_mask"][:4] = 0.0
    delta, metrics = update(algo, half, micro=4)
    assert metrics["update_skipped"] == 0.0 and np.isfinite(metrics["pg_loss"])
    if scope == "micro_batch":
        alone, _ = update(algo, {k: v[4:] for k, v in half.items()}, micro=4)
        assert_same_update(delta, alone)
