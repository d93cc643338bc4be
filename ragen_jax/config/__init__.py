"""A run's config: one typed schema (`RunConfig`) that holds every default once and checks itself.

    from ragen_jax.config import RunConfig, default_config
    cfg = default_config()               # the ml_collections config every configs/*.py starts from
    run = RunConfig.from_config(cfg)     # typed and checked; ConfigError lists every problem in config keys
"""

from ragen_jax.config.schema import RunConfig, default_config, default_plain, to_plain
from ragen_jax.config.algo import algo_preset_values
from ragen_jax.config.sections import MODEL_PATHS
from ragen_jax.errors import ConfigError


def validate_config(cfg, mode: str = "train") -> RunConfig:
    """Check a config as `mode` ("train", "eval" or "sft") runs it -> its RunConfig; ConfigError names every
    problem (mode "eval" skips what only training needs: mini-batches)."""
    return RunConfig.from_config(cfg, mode)


__all__ = ["MODEL_PATHS", "ConfigError", "RunConfig", "algo_preset_values", "default_config", "default_plain",
           "to_plain", "validate_config"]
