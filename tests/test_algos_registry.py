"""Registries (lookup, errors, custom registration, import paths) and algorithm presets."""

import jax.numpy as jnp
import numpy as np
import pytest

from ragen_jax import algos
from ragen_jax.algos import Registry


def test_registry_register_get_and_decorator():
    reg = Registry("widget")

    @reg.register("double")
    def double(x):
        return 2 * x

    reg.register("triple", lambda x: 3 * x)
    assert reg.get("double")(2) == 4 and reg.get("triple")(2) == 6
    assert reg.names() == ["double", "triple"] and "double" in reg and len(reg) == 2
    assert reg.get(double) is double  # callables pass through


def test_registry_errors_are_clear():
    reg = Registry("widget")
    reg.register("a", abs)
    with pytest.raises(KeyError, match=r"Unknown widget 'b'. Known: \['a'\]"):
        reg.get("b")
    with pytest.raises(ValueError, match="already registered"):
        reg.register("a", len)
    reg.register("a", len, overwrite=True)
    assert reg.get("a") is len
    with pytest.raises(ValueError, match="import paths"):
        reg.register("x:y", len)
    with pytest.raises(ImportError, match="no_such_module_xyz"):
        reg.get("no_such_module_xyz:f")
    with pytest.raises(AttributeError, match="nope"):
        reg.get("ragen_jax.algos:nope")
    with pytest.raises(TypeError):
        reg.get(3)


def test_import_path_with_dotted_attribute():
    reg = Registry("thing")
    assert reg.get("ragen_jax.algos:ADVANTAGE_ESTIMATORS.get") == algos.ADVANTAGE_ESTIMATORS.get
    assert reg.get("ragen_jax.algos.policy_loss:ppo_clip_loss") is algos.ppo_clip_loss


def test_verl_and_ragen_names_reach_the_built_ins():
    """A RAGEN / veRL config's names select the same functions: policy_loss.loss_mode 'gpg' is the plain policy
    gradient, adv_estimator 'reinforce_plus_plus_baseline' the group-baseline REINFORCE++."""
    assert algos.POLICY_LOSSES.get("gpg") is algos.reinforce_loss
    assert algos.ADVANTAGE_ESTIMATORS.get("reinforce_plus_plus_baseline") is algos.reinforce_plus_plus_baseline


def test_builtin_registries_are_populated():
    assert {"gae", "bilevel_gae", "grpo", "rloo", "reinforce_plus_plus"} <= set(algos.ADVANTAGE_ESTIMATORS)
    assert {"vanilla", "ppo", "reinforce", "gspo", "gspo_token", "cispo"} <= set(algos.POLICY_LOSSES)
    assert {"none", "tis", "icepop", "seq_geo_mask"} <= set(algos.ROLLOUT_CORRECTIONS)
    assert {"clipped", "mse"} <= set(algos.VALUE_LOSSES)
    assert {"kl", "k1", "abs", "mse", "k2", "low_var_kl", "k3", "k3+"} <= set(algos.KL_ESTIMATORS)
    assert {"token-mean", "seq-mean-token-mean", "seq-mean-token-sum"} <= set(algos.AGG_MODES)


def test_custom_policy_loss_selected_by_name():
    @algos.POLICY_LOSSES.register("test_sigmoid_pg")
    def sigmoid_pg(logprobs, old_logprobs, advantages, response_mask, *, temperature=1.0):
        loss = -advantages * jnp.tanh((logprobs - old_logprobs) / temperature)
        return loss * response_mask, {}

    try:
        fn = algos.POLICY_LOSSES.get("test_sigmoid_pg")
        lp, old = jnp.array([[0.0, -1.0]]), jnp.array([[-1.0, -1.0]])
        loss, _ = algos.call_with_supported(fn, lp, old, jnp.array([[2.0, 1.0]]), jnp.array([[1, 1]]),
                                            temperature=2.0, clip_ratio_low=0.2)
        np.testing.assert_allclose(loss, [[-2 * np.tanh(0.5), 0.0]], rtol=1e-6, atol=1e-6)
    finally:
        algos.POLICY_LOSSES.unregister("test_sigmoid_pg")


@pytest.mark.parametrize("name,estimator,norm,agg,critic", [
    ("ppo", "gae", True, "token-mean", True),
    ("dapo", "gae", True, "token-mean", True),
    ("grpo", "grpo", True, "seq-mean-token-mean", False),
    ("drgrpo", "grpo", False, "seq-mean-token-sum", False),
])
def test_presets(name, estimator, norm, agg, critic):
    cfg = algos.get_preset(name)
    assert (cfg["adv_estimator"], cfg["loss_agg_mode"], cfg["use_critic"]) == (estimator, agg, critic)
    if estimator == "grpo":
        assert cfg["norm_adv_by_std_in_grpo"] is norm
    assert (cfg["clip_ratio_low"], cfg["clip_ratio_high"], cfg["clip_ratio_c"]) == (0.2, 0.28, 3.0)
    assert cfg["use_kl_loss"] is False and cfg["entropy_coeff"] == 0.001 and cfg["cliprange_value"] == 0.5
    # every named piece resolves in its registry
    algos.ADVANTAGE_ESTIMATORS.get(algos.resolve_adv_estimator(cfg))
    algos.AGG_MODES.get(cfg["loss_agg_mode"])
    algos.POLICY_LOSSES.get(cfg["policy_loss"])
    algos.KL_ESTIMATORS.get(cfg["kl_loss_type"])


def test_preset_aliases_fresh_copies_and_errors():
    assert algos.get_preset("Dr.GRPO")["name"] == "drgrpo"
    a = algos.get_preset("ppo")
    a["gamma"] = 0.5
    assert algos.get_preset("ppo")["gamma"] == 1.0
    with pytest.raises(KeyError, match="Known"):
        algos.get_preset("trpo")
    assert algos.resolve_adv_estimator({**algos.get_preset("ppo"), "bi_level_gae": True}) == "bilevel_gae"


@pytest.mark.parametrize("name,loss,agg,clip", [
    ("gspo", "gspo", "seq-mean-token-mean", (3e-4, 4e-4)),  # GSPO paper sec. 5.1
    ("cispo", "cispo", "token-mean", (1.0, 5.0)),  # MiniMax-M1 (no lower bound); SkyRL's eps_high
])
def test_gspo_and_cispo_presets(name, loss, agg, clip):
    cfg = algos.get_preset(name)
    assert (cfg["policy_loss"], cfg["loss_agg_mode"], cfg["adv_estimator"]) == (loss, agg, "grpo")
    assert cfg["norm_adv_by_std_in_grpo"] is True and cfg["use_critic"] is False
    assert (cfg["clip_ratio_low"], cfg["clip_ratio_high"]) == clip
    assert cfg["rollout_correction"] == "none" and cfg["rollout_correction_bound"] is None
    algos.POLICY_LOSSES.get(cfg["policy_loss"])
    algos.ROLLOUT_CORRECTIONS.get(cfg["rollout_correction"])


def test_every_preset_is_a_config_variant():
    from configs.base import apply_variants, get_base_config

    for name in algos.preset_names():
        c = apply_variants(get_base_config(), name, {})
        assert c.algo.preset == name and c.algo.policy_loss == algos.get_preset(name)["policy_loss"]
    with pytest.raises(ValueError, match="'cispo'.*'gspo'"):
        apply_variants(get_base_config(), "trpo", {})


def test_verl_loss_modes_are_registered():
    """veRL's actor.policy_loss.loss_mode names select the same losses here."""
    for name in ("clip_cov", "kl_cov", "geo_mean", "sapo"):
        assert algos.POLICY_LOSSES.get(name).__module__ == "ragen_jax.algos.policy_loss"


def test_remax_says_what_it_needs_and_what_to_use():
    """veRL's remax needs a greedy rollout per step (not run here): the error says so and names grpo / rloo, not
    "register your own"."""
    with pytest.raises(KeyError, match=r"'remax' is not available.*greedy rollout.*'grpo' or 'rloo'"):
        algos.ADVANTAGE_ESTIMATORS.get("remax")
    from configs import bandit
    from ragen_jax.config import validate_config

    cfg = bandit.get_config("tiny,grpo")
    cfg.algo.adv_estimator = "remax"
    with pytest.raises(ValueError, match="greedy rollout"):
        validate_config(cfg)


def test_an_unknown_name_says_which_registry_to_extend():
    with pytest.raises(KeyError, match=r"@ragen_jax\.algos\.ADVANTAGE_ESTIMATORS\.register\('gea'\)"):
        algos.ADVANTAGE_ESTIMATORS.get("gea")
