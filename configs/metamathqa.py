"""MetaMathQA (RAGEN's `_5_metamathqa`): one answer per problem (1 action per trajectory).

RAGEN's base loop settings (5 turns x 2 actions); the single action budget ends the episode after
the first parsed answer. Offline word problems by default; `--config.env.kwargs.data_path=FILE`
loads the real MetaMathQA JSON/JSONL/parquet; `--config.env.kwargs.answer_match=ragen` scores answers by RAGEN's
rule alone (envs/metamathqa/README.md). Variants: `:tiny`, `:grpo` / `:0.5b` ...
"""

import ml_collections
from ml_collections import config_dict

from configs.base import apply_tiny, apply_variants, get_base_config


def _tiny(c):
    apply_tiny(c)
    c.val.groups = c.val.batch_size = 32


def get_config(arg: str | None = None):
    c = get_base_config()
    c.env.name = "MetamathQA"
    c.env.max_actions_per_traj = 1
    c.env.kwargs = ml_collections.ConfigDict(dict(
        data_path=config_dict.placeholder(str), max_instances=config_dict.placeholder(int), max_attempts=1,
        answer_match="lenient"))
    c.workdir = "runs/metamathqa"
    return apply_variants(c, arg, {"tiny": _tiny})
