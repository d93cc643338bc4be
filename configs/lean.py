"""Lean (RAGEN's `_7_lean`): tactic-by-tactic proofs against a Kimina Lean server.

15 turns x up to 4 tactics, 30 tactics per trajectory, response_length 512, 8096-token context.
Needs a running server at `env.kwargs.server_url` (see envs/lean README; tests use the stand-in
in envs/lean/testing_server.py). Built-in theorems by default; `--config.env.kwargs.dataset_path`
loads a miniF2F-style file. Variants: `:tiny` (tiny model on CPU), plus `:grpo` / `:0.5b` ...
"""

import ml_collections
from ml_collections import config_dict

from configs.base import apply_tiny, apply_variants, get_base_config


def _tiny(c):
    apply_tiny(c)
    c.val.groups = c.val.batch_size = 16


def get_config(arg: str | None = None):
    c = get_base_config()
    c.env.name = "Lean"
    c.env.max_turn = 15
    c.env.max_actions_per_turn = 4
    c.env.max_actions_per_traj = 30
    c.env.kwargs = ml_collections.ConfigDict(dict(
        dataset_path=config_dict.placeholder(str), server_url="http://127.0.0.1:8000",
        api_key=config_dict.placeholder(str), request_timeout=30.0, max_retries=3, max_steps=100))
    c.rollout.response_length = 512
    c.rollout.max_model_len = 8096
    c.rollout.context_window = 5  # RAGEN's max_context_window (used by the non-full context modes)
    c.workdir = "runs/lean"
    return apply_variants(c, arg, {"tiny": _tiny})
