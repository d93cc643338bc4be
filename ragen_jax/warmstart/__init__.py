"""Supervised warm start before RL (not in RAGEN): demonstrations in exactly the rollout's prompt/response format
(an env's oracle, random valid play, or a JSONL of chat messages), behaviour cloning on their response tokens, and
validation before and after."""

from ragen_jax.warmstart.demo_cache import build_demos
from ragen_jax.warmstart.demo_jsonl import load_jsonl_demos, rows_from_conversations, write_demo_jsonl
from ragen_jax.warmstart.demos import DemoRows, demo_rows, oracle_demo_episodes, play_oracle_episodes
from ragen_jax.warmstart.flow import run_warmstart, train_sft
from ragen_jax.warmstart.sft import SFTData, make_sft_step, prepare_sft_data, sft_sums

__all__ = ["DemoRows", "SFTData", "build_demos", "demo_rows", "load_jsonl_demos", "make_sft_step",
           "oracle_demo_episodes", "play_oracle_episodes", "prepare_sft_data", "rows_from_conversations",
           "run_warmstart", "sft_sums", "train_sft", "write_demo_jsonl"]
