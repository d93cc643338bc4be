"""SearchQA (RAGEN's `_9_search`): search[query] / finish[answer] over a corpus, 5 turns x 1 action.

16 groups x 8, val 256 x 1, 5000-token context, up to 5 documents per search. Retrieval runs
in-process (BM25 over the bundled synthetic corpus) unless `--config.env.kwargs.retrieval_url`
names a server (`python -m envs.searchqa.serve`, RAGEN's API); `questions_path` / `corpus_path`
load HotpotQA-style files. Variants: `:tiny` (tiny model on CPU), `:dense` (dense retrieval,
needs `env.kwargs.model_dir`), plus `:grpo` / `:0.5b` ...; `:tool` plays ToolSearchQA through tool calls (search,
then answer; docs/tools.md), `:tiny_tool` on the tiny model.
"""

import ml_collections
from ml_collections import config_dict

from configs.base import apply_tiny, apply_tool_calls, apply_variants, get_base_config


def _tiny(c):
    apply_tiny(c)
    c.val.groups = c.val.batch_size = 16


def _dense(c):
    c.env.kwargs.retrieval_method = "dense"


def _tool(c):
    """ToolSearchQA in the tool-call action format: one call a turn."""
    c.env.name = "ToolSearchQA"
    apply_tool_calls(c)


def _tiny_tool(c):
    _tiny(c)
    _tool(c)
    c.env.max_turn = 3
    c.env.groups = c.env.group_size = 4
    c.env.kwargs.top_k = 2
    c.env.kwargs.max_doc_chars = 200
    c.trainer.mini_batch_size = 16
    c.rollout.enable_think = False  # a bare tool call fits the tiny model's short responses
    c.rollout.response_length = 96
    c.rollout.max_model_len = 4096


def get_config(arg: str | None = None):
    c = get_base_config()
    c.env.name = "SearchQA"
    c.env.groups, c.env.group_size = 16, 8
    c.env.max_turn = 5
    c.env.max_actions_per_turn = 1
    c.env.max_actions_per_traj = 10
    c.env.kwargs = ml_collections.ConfigDict(dict(
        questions_path=config_dict.placeholder(str), corpus_path=config_dict.placeholder(str),
        retrieval_url=config_dict.placeholder(str), retrieval_method="bm25",
        model_dir=config_dict.placeholder(str), max_steps=10, top_k=5))
    c.val.groups = 256
    c.rollout.max_model_len = 5000
    c.trainer.mini_batch_size = 32
    c.trainer.micro_batch_size = 4
    c.workdir = "runs/searchqa"
    return apply_variants(c, arg, {"tiny": _tiny, "dense": _dense, "tool": _tool, "tiny_tool": _tiny_tool})
