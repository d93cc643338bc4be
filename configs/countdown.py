"""Countdown (RAGEN's `_4_countdown`): reach the target with each number once, single turn.

Seeded offline tasks by default; `--config.env.kwargs.data_path=FILE` (parquet/JSONL of target,
nums) loads the original data. Variants: `:tiny` (tiny model on CPU), `:grpo` / `:0.5b` ...
"""

import ml_collections
from ml_collections import config_dict

from configs.base import apply_tiny, apply_variants, get_base_config


def _tiny(c):
    apply_tiny(c)
    c.val.groups = c.val.batch_size = 32


def get_config(arg: str | None = None):
    c = get_base_config()
    c.env.name = "Countdown"
    c.env.max_turn = 1
    c.env.max_actions_per_turn = 1
    c.env.max_actions_per_traj = 1
    c.env.kwargs = ml_collections.ConfigDict(dict(
        data_path=config_dict.placeholder(str), max_instances=20000, solvable_ops="+-"))
    c.workdir = "runs/countdown"
    return apply_variants(c, arg, {"tiny": _tiny})
