"""DeepCoder (RAGEN's `_10_deepcoder`): one program per problem, scored by sandboxed tests.

Single turn, one action; reward = fraction of tests passed (3 s per test), success = all pass.
The bundled problems run offline; `--config.env.kwargs.dataset_path=FILE` loads DeepCoder data.
Variants: `:tiny` (tiny model on CPU), plus `:grpo` / `:0.5b` ...
"""

import ml_collections
from ml_collections import config_dict

from configs.base import apply_tiny, apply_variants, get_base_config


def _tiny(c):
    apply_tiny(c)
    c.val.groups = c.val.batch_size = 16
    c.env.kwargs.max_concurrency = 1  # test processes at once per env (all envs: at most max_concurrent_sandboxes)


def get_config(arg: str | None = None):
    c = get_base_config()
    c.env.name = "DeepCoder"
    c.env.max_turn = 1
    c.env.max_actions_per_turn = 1
    c.env.max_actions_per_traj = 1
    c.env.kwargs = ml_collections.ConfigDict(dict(
        dataset_path=config_dict.placeholder(str), limit=config_dict.placeholder(int), max_steps=1,
        test_timeout_s=3.0, memory_bytes=1 << 30, max_concurrency=4,
        max_concurrent_sandboxes=config_dict.placeholder(int)))
    c.workdir = "runs/deepcoder"
    return apply_variants(c, arg, {"tiny": _tiny})
