"""--print_config and config.json name every user function a config selects by import path, and its file."""

import functools

from configs.base import apply_tiny, get_base_config
from ragen_jax import algos
from ragen_jax.trainer.report import custom_functions


def _scaled_grpo(inputs, *, scale: float = 1.0):
    adv, returns = algos.ADVANTAGE_ESTIMATORS.get("grpo")(inputs)
    return scale * adv, scale * returns


SCALED_TWICE = functools.partial(_scaled_grpo, scale=2.0)  # docs/custom_losses.md: your own hyper-parameter


class Namespace:
    ROW_MEAN = algos.AGG_MODES.get("seq-mean-token-mean")


def test_partials_dotted_paths_and_every_registry_key_are_found_in_their_module():
    cfg = get_base_config()
    apply_tiny(cfg)
    cfg.algo.custom_adv_estimator = "test_report_custom_functions:SCALED_TWICE"
    cfg.algo.loss_agg_mode = "test_report_custom_functions:Namespace.ROW_MEAN"
    cfg.algo.value_loss = "ragen_jax.algos.value_loss:mse_value_loss_missing"
    found = custom_functions(cfg)
    assert found["algo.custom_adv_estimator"] == f"test_report_custom_functions:SCALED_TWICE ({__file__})"
    assert found["algo.loss_agg_mode"] == f"test_report_custom_functions:Namespace.ROW_MEAN ({__file__})"
    assert found["algo.value_loss"].endswith("(not importable)")
    assert "algo.custom_policy_loss" not in found and "algo.kl_loss_type" not in found  # unset, or a registered name
