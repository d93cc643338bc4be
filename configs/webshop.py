"""WebShop (RAGEN's `_6_webshop`): shop on a simulated site, 9 turns x 1 action, 15000-token context.

The synthetic catalogue (300 products) runs offline; `--config.env.kwargs.data_dir=DIR` loads the
original WebShop product and goal files. Variants: `:tiny` (tiny model on CPU), `:score` (reward
is the raw purchase score instead of RAGEN's 1-if-perfect), plus `:grpo` / `:0.5b` ...; `:tool` plays ToolWebShop
through tool calls (search, click; docs/tools.md), `:tiny_tool` on the tiny model.
"""

import ml_collections
from ml_collections import config_dict

from configs.base import apply_tiny, apply_tool_calls, apply_variants, get_base_config


def _tiny(c):
    apply_tiny(c)
    c.val.groups = c.val.batch_size = 16
    c.rollout.max_model_len = 2048  # a results page is ~1300 tiny-tokenizer tokens


def _score(c):
    c.env.kwargs.reward_mode = "score"


def _tool(c):
    """ToolWebShop in the tool-call action format: one call a turn, RAGEN's tips (text-action syntax) off."""
    c.env.name = "ToolWebShop"
    c.env.kwargs.show_tips = False
    apply_tool_calls(c)


def _tiny_tool(c):
    _tiny(c)
    _tool(c)
    c.env.max_turn = c.env.max_actions_per_traj = 3
    c.env.groups = c.env.group_size = 4
    c.trainer.mini_batch_size = 16
    c.rollout.enable_think = False  # a bare tool call fits the tiny model's short responses
    c.rollout.response_length = 96
    c.rollout.max_model_len = 6144  # three results pages of ~1300 tiny-tokenizer tokens


def get_config(arg: str | None = None):
    c = get_base_config()
    c.env.name = "WebShop"
    c.env.max_turn = 9
    c.env.max_actions_per_turn = 1
    c.env.max_actions_per_traj = 9
    c.env.kwargs = ml_collections.ConfigDict(dict(
        data_dir=config_dict.placeholder(str), num_products=config_dict.placeholder(int), seed=0,
        split="train", reward_mode="binary", max_steps=config_dict.placeholder(int), show_tips=True))
    c.val.env_kwargs = ml_collections.ConfigDict(dict(split="val"))  # RAGEN validates on the val split's goals
    c.rollout.max_model_len = 15000
    c.trainer.mini_batch_size = 32
    c.trainer.micro_batch_size = 4
    c.workdir = "runs/webshop"
    return apply_variants(c, arg, {"tiny": _tiny, "score": _score, "tool": _tool, "tiny_tool": _tiny_tool})
