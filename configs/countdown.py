"""Countdown (RAGEN's `_4_countdown`): reach the target with each number once, single turn.

Seeded offline tasks by default; `--config.env.kwargs.data_path=FILE` (parquet/JSONL of target,
nums) loads the original data. Variants: `:tiny` (tiny model on CPU), `:grpo` / `:0.5b` ...;
`:tool` plays ToolCountdown through tool calls (a calculator, then submit; docs/tools.md), `:tiny_tool` on the tiny
model.
"""

import ml_collections
from ml_collections import config_dict

from configs.base import apply_tiny, apply_tool_calls, apply_variants, get_base_config


def _tiny(c):
    apply_tiny(c)
    c.val.groups = c.val.batch_size = 32


def _tool(c):
    """ToolCountdown in the tool-call action format: up to 3 turns, one call each (calculate, then submit)."""
    c.env.name = "ToolCountdown"
    c.env.max_turn = 3
    c.env.max_actions_per_turn = 1
    c.env.max_actions_per_traj = 3
    apply_tool_calls(c)


def _tiny_tool(c):
    _tiny(c)
    _tool(c)
    c.env.groups = c.env.group_size = 4
    c.val.groups = c.val.batch_size = 16
    c.trainer.mini_batch_size = 16
    c.rollout.enable_think = False  # a bare tool call fits the tiny model's short responses
    c.rollout.response_length = 96  # a call of the tiny tokenizer's short tokens
    c.rollout.max_model_len = 2048


def get_config(arg: str | None = None):
    c = get_base_config()
    c.env.name = "Countdown"
    c.env.max_turn = 1
    c.env.max_actions_per_turn = 1
    c.env.max_actions_per_traj = 1
    c.env.kwargs = ml_collections.ConfigDict(dict(
        data_path=config_dict.placeholder(str), max_instances=20000, solvable_ops="+-"))
    c.workdir = "runs/countdown"
    return apply_variants(c, arg, {"tiny": _tiny, "tool": _tool, "tiny_tool": _tiny_tool})
