"""`--mode=eval` end to end for every env config's `:tiny` preset (Trainer + run_eval, in process).

Each test plays a handful of validation episodes with a shrunken tiny model and checks RAGEN's
metric names and the JSONL dump (one line per episode, OpenAI chat messages + metadata).
"""

import importlib
import json
import math

import pytest

from ragen_jax.config_check import validate_config
from ragen_jax.rollout.dump import read_jsonl

VAL_GROUPS, VAL_GROUP_SIZE = 2, 2  # 4 episodes, pass@2
ENV_CONFIGS = {  # config module -> (val env tag, max_model_len that fits one turn of that env)
    "frozenlake": ("FrozenLake", 768),
    "bandit": ("Bandit", 768),
    "countdown": ("Countdown", 512),
    "metamathqa": ("MetamathQA", 512),
    "sudoku": ("SimpleSudoku", 1536),
    "webshop": ("WebShop", 2048),
    "searchqa": ("SearchQA", 1024),
    "deepcoder": ("DeepCoder", 768),
    "lean": ("Lean", 768),
}
METADATA_KEYS = {"env_id", "env_tag", "seed", "group_id", "num_turns", "num_actions", "total_reward", "success"}


def tiny_eval_config(module: str, max_model_len: int, variants: str = "tiny"):
    """The env's `:tiny` config shrunk further: 4 validation episodes, 16-token turns, 1-layer model."""
    c = importlib.import_module(f"configs.{module}").get_config(variants)
    c.model.tiny.update(hidden_size=64, num_layers=1, num_heads=2, num_kv_heads=1, intermediate_size=128)
    c.env.groups, c.env.group_size = 1, 2
    c.val.groups, c.val.group_size, c.val.batch_size = VAL_GROUPS, VAL_GROUP_SIZE, VAL_GROUPS * VAL_GROUP_SIZE
    c.rollout.response_length = 16
    c.rollout.max_model_len = max_model_len
    c.trainer.mini_batch_size = c.trainer.micro_batch_size = 2
    validate_config(c)
    return c


def run_tiny_eval(cfg, workdir) -> tuple[dict, list[dict]]:
    from ragen_jax.trainer.evaluate import run_eval
    from ragen_jax.trainer.loop import Trainer

    trainer = Trainer(cfg, str(workdir))
    try:
        metrics = run_eval(trainer)
    finally:
        for env in (trainer.train_env, trainer.val_env):
            if hasattr(env, "close"):
                env.close()
    return metrics, read_jsonl(str(workdir / "eval" / "rollouts.jsonl"))


def check_eval_output(metrics: dict, records: list[dict], tag: str, cfg) -> None:
    """RAGEN's metric names with sane values; one JSONL line per episode in the documented form."""
    n = VAL_GROUPS * VAL_GROUP_SIZE
    for name in ("success", "num_actions", f"pass@{VAL_GROUP_SIZE}", "action_is_valid", "action_is_effective"):
        key = f"val/{tag}/{name}"
        assert key in metrics, f"missing {key}; got {sorted(metrics)}"
        assert math.isfinite(metrics[key])
    for name in ("success", f"pass@{VAL_GROUP_SIZE}", "action_is_valid", "action_is_effective"):
        assert 0.0 <= metrics[f"val/{tag}/{name}"] <= 1.0
    assert metrics[f"val/{tag}/pass@{VAL_GROUP_SIZE}"] >= metrics[f"val/{tag}/success"]
    assert 0.0 <= metrics[f"val/{tag}/num_actions"] <= cfg.env.max_actions_per_traj
    assert 1 <= metrics["val/response_length"] <= cfg.rollout.response_length
    assert metrics["eval/num_episodes"] == n
    json.dumps(metrics)  # run.py prints them as JSON

    assert len(records) == n
    for i, rec in enumerate(records):
        assert rec["custom_id"] == f"traj_{i}"
        roles = [m["role"] for m in rec["messages"]]
        assert roles[:2] == ["system", "user"] and "assistant" in roles
        assert all(isinstance(m["content"], str) for m in rec["messages"])
        meta = rec["metadata"]
        assert METADATA_KEYS <= set(meta), f"metadata lacks {METADATA_KEYS - set(meta)}"
        assert meta["env_id"] == i and meta["env_tag"] == tag
        assert meta["group_id"] == i // VAL_GROUP_SIZE
        assert meta["seed"] == cfg.val.seed + meta["group_id"]
        assert 1 <= meta["num_turns"] <= cfg.env.max_turn
        assert roles.count("assistant") == meta["num_turns"]
    assert metrics[f"val/{tag}/success"] == pytest.approx(sum(r["metadata"]["success"] for r in records) / n)
    mean_actions = sum(r["metadata"]["num_actions"] for r in records) / n
    assert metrics[f"val/{tag}/num_actions"] == pytest.approx(mean_actions)


@pytest.mark.parametrize("module", ["frozenlake", "bandit", "countdown", "metamathqa", "sudoku", "webshop",
                                    "searchqa", "deepcoder"])
def test_tiny_eval_end_to_end(module, tmp_path):
    tag, max_model_len = ENV_CONFIGS[module]
    cfg = tiny_eval_config(module, max_model_len)
    metrics, records = run_tiny_eval(cfg, tmp_path)
    check_eval_output(metrics, records, tag, cfg)
    assert metrics[f"val/{tag}/env_error"] == 0.0, [r["metadata"]["error"] for r in records]


def test_tiny_eval_lean_against_stand_in_server(tmp_path):
    from envs.lean.testing_server import StandInLeanServer

    tag, max_model_len = ENV_CONFIGS["lean"]
    cfg = tiny_eval_config("lean", max_model_len)
    with StandInLeanServer() as server:
        cfg.env.kwargs.server_url = server.url
        metrics, records = run_tiny_eval(cfg, tmp_path)
    check_eval_output(metrics, records, tag, cfg)
    assert metrics[f"val/{tag}/env_error"] == 0.0, [r["metadata"]["error"] for r in records]
    assert all("theorem" in r["messages"][1]["content"] for r in records)
