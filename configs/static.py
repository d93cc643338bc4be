"""RAGEN's `static` env: one answer per question (1 action per trajectory), over a local copy of MetaMathQA,
GSM8K, TheoremQA, MATH, MMLU or MMLU-STEM (envs/static/README.md).

`--config.env.kwargs.data_path=PATH` names the copy (a file, a folder of the hub's files, or a `save_to_disk`
folder); without one, metamathqa uses offline word problems. Variants: `:tiny` (tiny model on CPU, offline
problems), one per dataset (`:gsm8k`, `:theoremqa`, `:math`, `:mmlu`, `:mmlu_stem`; they need data_path),
`:grpo` / `:0.5b` ...; combine with commas (`:tiny,gsm8k`).
"""

import functools

import ml_collections
from ml_collections import config_dict

from configs.base import apply_tiny, apply_variants, get_base_config


def _tiny(c):
    apply_tiny(c)
    c.val.groups = c.val.batch_size = 32


def _dataset(c, name):
    c.env.kwargs.dataset_name = name


def get_config(arg: str | None = None):
    c = get_base_config()
    c.env.name = "Static"
    c.env.max_actions_per_traj = 1
    c.env.kwargs = ml_collections.ConfigDict(dict(
        dataset_name="metamathqa", data_path=config_dict.placeholder(str), split=config_dict.placeholder(str),
        max_instances=config_dict.placeholder(int), max_attempts=config_dict.placeholder(int), answer_match="ragen"))
    c.workdir = "runs/static"
    datasets = {name: functools.partial(_dataset, name=name)
                for name in ("metamathqa", "gsm8k", "theoremqa", "math", "mmlu", "mmlu_stem")}
    return apply_variants(c, arg, {"tiny": _tiny, **datasets})
