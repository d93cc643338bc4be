"""`--mode=eval` end to end for every env config's `:tiny` preset (Trainer + run_eval, in process).

Each test plays a handful of validation episodes with a shrunken tiny model and checks RAGEN's
metric names and the JSONL dump (one line per episode, OpenAI chat messages + metadata).
"""

import ast
import importlib
import json
import math

import pytest

from ragen_jax.config import validate_config
from ragen_jax.rollout.dump import read_jsonl

VAL_GROUPS, VAL_GROUP_SIZE = 2, 2  # 4 episodes, pass_at_2
MAX_TURNS = 3  # caps the multi-turn envs (a random tiny policy rarely finishes earlier)
MAX_MODEL_LEN = 2048  # one size for all envs, so they share compiled sampler programs
VAL_TAGS = {"frozenlake": "FrozenLake", "bandit": "Bandit", "countdown": "Countdown", "metamathqa": "MetamathQA",
            "sudoku": "SimpleSudoku", "webshop": "WebShop", "searchqa": "SearchQA", "deepcoder": "DeepCoder",
            "lean": "Lean", "game_2048": "game_2048", "rubikscube": "rubikscube"}
METADATA_KEYS = {"env_id", "env_tag", "seed", "group_id", "num_turns", "num_actions", "total_reward", "success"}


def tiny_eval_config(module: str, variants: str = "tiny"):
    """The env's `:tiny` config shrunk further: 4 episodes of <= 3 turns, 16-token turns, 1-layer model."""
    c = importlib.import_module(f"configs.{module}").get_config(variants)
    c.model.tiny.update(hidden_size=64, num_layers=1, num_heads=2, num_kv_heads=1, intermediate_size=128)
    c.env.groups, c.env.group_size = 1, 2
    c.val.groups, c.val.group_size, c.val.batch_size = VAL_GROUPS, VAL_GROUP_SIZE, VAL_GROUPS * VAL_GROUP_SIZE
    c.env.max_turn = min(c.env.max_turn, MAX_TURNS)
    c.rollout.response_length = 16
    c.rollout.max_model_len = MAX_MODEL_LEN
    c.trainer.mini_batch_size = c.trainer.micro_batch_size = 2
    validate_config(c)
    return c


def run_tiny_eval(cfg, workdir) -> tuple[dict, list[dict]]:
    from ragen_jax.trainer.evaluate import run_eval
    from ragen_jax.trainer import Trainer

    trainer = Trainer(cfg, str(workdir))
    try:
        metrics = run_eval(trainer)
    finally:
        for env in (trainer.train_env, trainer.val_envs[0]):
            if hasattr(env, "close"):
                env.close()
    return metrics, read_jsonl(str(workdir / "eval" / "init" / "rollouts.jsonl"))


def check_eval_output(metrics: dict, records: list[dict], tag: str, cfg) -> None:
    """RAGEN's metric names with sane values; one JSONL line per episode in the documented form."""
    n = VAL_GROUPS * VAL_GROUP_SIZE
    for name in ("success", "num_actions", f"pass_at_{VAL_GROUP_SIZE}", "action_is_valid", "action_is_effective"):
        key = f"val/{tag}/{name}"
        assert key in metrics, f"missing {key}; got {sorted(metrics)}"
        assert math.isfinite(metrics[key])
    for name in ("success", f"pass_at_{VAL_GROUP_SIZE}", "action_is_valid", "action_is_effective"):
        assert 0.0 <= metrics[f"val/{tag}/{name}"] <= 1.0
    assert metrics[f"val/{tag}/pass_at_{VAL_GROUP_SIZE}"] >= metrics[f"val/{tag}/success"]
    assert 0.0 <= metrics[f"val/{tag}/num_actions"] <= cfg.env.max_actions_per_traj
    assert 1 <= metrics["val/response_length_per_turn"] <= cfg.rollout.response_length
    # RAGEN's response_length: tokens per training sample (a "full" sample holds every turn of its episode)
    assert 1 <= metrics["val/response_length"] <= cfg.env.max_turn * cfg.rollout.response_length
    if cfg.rollout.context_mode != "full":
        assert metrics["val/response_length"] == metrics["val/response_length_per_turn"]
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
        if cfg.rollout.prompt_style == "compact":  # a user turn is ["Reward:\n<r>\n"] + "\n<state>\n"
            states = [m["content"].rsplit("\n\n", 1)[-1].removeprefix("\n")
                      for m in rec["messages"] if m["role"] == "user"]
        else:
            states = [m["content"].split("State:\n", 1)[1] for m in rec["messages"] if "State:\n" in m["content"]]
        assert len(states) == meta["num_turns"] and all(s.strip() and not s.startswith("\n") for s in states)
    assert metrics[f"val/{tag}/success"] == pytest.approx(sum(r["metadata"]["success"] for r in records) / n)
    mean_actions = sum(r["metadata"]["num_actions"] for r in records) / n
    assert metrics[f"val/{tag}/num_actions"] == pytest.approx(mean_actions)


@pytest.mark.slow  # default run: too long for CI's 15 minutes on 2 cores
@pytest.mark.parametrize("module", ["frozenlake", "bandit", "countdown", "metamathqa", "sudoku", "webshop",
                                    "searchqa", "deepcoder",
                                    *(pytest.param(m, marks=pytest.mark.slow) for m in ("game_2048", "rubikscube"))])
def test_tiny_eval_end_to_end(module, tmp_path):
    tag = VAL_TAGS[module]
    cfg = tiny_eval_config(module)
    metrics, records = run_tiny_eval(cfg, tmp_path)
    check_eval_output(metrics, records, tag, cfg)
    assert metrics[f"val/{tag}/env_error"] == 0.0, [r["metadata"]["error"] for r in records]


@pytest.mark.slow  # default run: too long for CI's 15 minutes on 2 cores
def test_tiny_eval_lean_against_stand_in_server(tmp_path):
    from envs.lean.testing_server import StandInLeanServer

    tag = VAL_TAGS["lean"]
    cfg = tiny_eval_config("lean")
    with StandInLeanServer() as server:
        cfg.env.kwargs.server_url = server.url
        metrics, records = run_tiny_eval(cfg, tmp_path)
    check_eval_output(metrics, records, tag, cfg)
    assert metrics[f"val/{tag}/env_error"] == 0.0, [r["metadata"]["error"] for r in records]
    assert all("theorem" in r["messages"][1]["content"] for r in records)


# RAGEN's settings per env (config/_N_<env>.yaml over base.yaml and envs.yaml):
# env name, max_turn, actions per turn, actions per trajectory, response_length, max_model_len, groups x size
RAGEN_SETTINGS = {
    "frozenlake": ("CoordFrozenLake", 5, 2, 10, 400, 3600, 8, 16),
    "bandit": ("Bandit", 1, 1, 1, 500, 3600, 8, 16),
    "countdown": ("Countdown", 1, 1, 1, 400, 3600, 8, 16),
    "metamathqa": ("MetamathQA", 5, 2, 1, 400, 3600, 8, 16),
    "sudoku": ("SimpleSudoku", 5, 2, 20, 400, 3600, 8, 16),
    "webshop": ("WebShop", 9, 1, 9, 400, 15000, 8, 16),
    "searchqa": ("SearchQA", 5, 1, 10, 400, 5000, 16, 8),
    "deepcoder": ("DeepCoder", 1, 1, 1, 400, 3600, 8, 16),
    "lean": ("Lean", 15, 4, 30, 512, 8096, 8, 16),
    "game_2048": ("game_2048", 800, 1, 700, 256, 8192, 8, 16),
    "rubikscube": ("rubikscube", 25, 4, 20, 500, 3600, 8, 16),
}


LEARNING_PRESETS = ("sokoban", "frozenlake", "bandit", "game_2048", "rubikscube")  # warm start then RL, validated on 128-512 episodes


@pytest.mark.parametrize("module", sorted(RAGEN_SETTINGS))
def test_default_config_matches_ragen(module):
    get_config = importlib.import_module(f"configs.{module}").get_config
    c = get_config()
    validate_config(c)
    got = (c.env.name, c.env.max_turn, c.env.max_actions_per_turn, c.env.max_actions_per_traj,
           c.rollout.response_length, c.rollout.max_model_len, c.env.groups, c.env.group_size)
    assert got == RAGEN_SETTINGS[module]
    assert (c.env.train_seed, c.val.seed, c.val.temperature) == (10000, 123, 0.5)
    tiny = get_config("tiny")
    validate_config(tiny)
    episodes = tiny.val.groups * tiny.val.group_size
    if module in LEARNING_PRESETS:  # the quickstart presets report learning: enough episodes to resolve it
        assert tiny.warmstart.enabled and 128 <= episodes <= 512
    else:
        assert 16 <= episodes <= 32
    assert tiny.model.preset == "tiny"
    assert tiny.rollout.response_length <= 32 and tiny.rollout.max_model_len <= 2048


def test_variants_validate_and_unknown_ones_fail():
    from configs import bandit, frozenlake, searchqa, sudoku, webshop

    assert bandit.get_config("test").val.name == "BanditTest"
    assert frozenlake.get_config("tiny,slippery").env.kwargs.success_rate == 0.8
    assert webshop.get_config("score").env.kwargs.reward_mode == "score"
    assert searchqa.get_config("dense").env.kwargs.retrieval_method == "dense"
    assert sudoku.get_config("medium").env.name == "MediumSudoku"
    for module, arg in ((bandit, "test,grpo"), (frozenlake, "filter,0.5b"), (sudoku, "finishable,medium,tiny")):
        validate_config(module.get_config(arg))
    with pytest.raises(ValueError, match="Unknown config variant 'finishable'"):
        frozenlake.get_config("finishable")


CONFIG_MODULES = ("sokoban", "frozenlake", "bandit", "countdown", "metamathqa", "sudoku", "webshop", "searchqa",
                  "deepcoder", "lean", "game_2048", "rubikscube")


def known_variants(module) -> list[str]:
    """The variants a config file accepts, as its unknown-variant error lists them."""
    with pytest.raises(ValueError, match="Known variants: ") as info:
        module.get_config("no_such_variant")
    return ast.literal_eval(str(info.value).split("Known variants: ", 1)[1].rstrip("."))


@pytest.mark.parametrize("name", CONFIG_MODULES)
def test_every_variant_of_every_config_validates_alone_and_after_tiny(name):
    """What README promises: each variant after the colon, alone or combined with `:tiny` (a model size aside: the
    tiny preset loads no checkpoint, and validate_config says so), loads and passes validate_config."""
    from configs.base import MODEL_PATHS

    module = importlib.import_module(f"configs.{name}")
    variants = known_variants(module)
    assert {"tiny", "grpo", "ppo", "0.5b"} <= set(variants), variants
    for arg in [None, *variants, *(f"tiny,{v}" for v in variants if v != "tiny" and v not in MODEL_PATHS)]:
        cfg = module.get_config(arg)
        for mode in ("train", "eval"):
            validate_config(cfg, mode=mode)


def play_sudoku_with_solution(cfg, seed: int) -> tuple[bool, int]:
    """Place the solution's values hole by hole within the config's turn and action budgets."""
    from envs.registry import make

    env = make(cfg.env.name, **dict(cfg.env.kwargs))
    env.reset(seed)
    holes = [(r, c) for r, c in zip(*(env.initial == 0).nonzero())]
    used, solved = 0, False
    for _ in range(cfg.env.max_turn):
        turn = holes[:min(cfg.env.max_actions_per_turn, cfg.env.max_actions_per_traj - used)]
        holes = holes[len(turn):]
        for r, c in turn:
            _, _, terminated, truncated, info = env.step(f"{r + 1},{c + 1},{env.solution[r, c]}")
            used += 1
            solved = bool(info.get("success", False)) and terminated
            if terminated or truncated:
                return solved, used
        if used >= cfg.env.max_actions_per_traj:
            break
    return solved, used


@pytest.mark.parametrize("variants", ["finishable", "medium,finishable", "tiny,finishable"])
def test_sudoku_finishable_budget_can_solve(variants):
    from configs.sudoku import get_config

    solved, used = play_sudoku_with_solution(get_config(variants), seed=123)
    assert solved and used == (40 if "medium" in variants else 32)


def test_sudoku_ragen_budget_cannot_solve():
    from configs.sudoku import get_config

    solved, used = play_sudoku_with_solution(get_config(), seed=123)
    assert not solved and used == 10  # 5 turns x 2 actions of a 20-action budget; 32 holes


def test_host_batch_repeats_the_state_after_a_turn_without_actions():
    """A turn with no parsed action leaves the state as it was, and the next prompt shows it again."""
    import numpy as np

    from envs.batch import make_env_batch

    batch = make_env_batch("Countdown", 3)
    first = batch.reset([5, 6, 7])
    out = batch.step([[], ["1 + 2"], []], np.array([True, True, False]))
    assert out.observations[0] == first[0] and out.observations[2] == ""
    assert out.actions_executed.tolist() == [0, 1, 0]


class ScriptedSampler:
    """Stands in for the val engine's sampler: row b answers `answers[b]` in RAGEN's format."""

    def __init__(self, real, tokenizer, answers: list[str]):
        self.real, self.tok, self.answers = real, tokenizer, answers

    def init_cache(self):
        return self.real.init_cache()

    def generate(self, params, new_tokens, new_lens, key, config, *, cache, cache_lens, active):
        import jax.numpy as jnp
        import numpy as np

        from ragen_jax.sampling import SampleOutput

        B, N = new_tokens.shape[0], config.max_new_tokens
        toks, lens = np.full((B, N), self.tok.pad_token_id, np.int32), np.zeros(B, np.int32)
        for b in np.nonzero(active)[0]:
            ids = self.tok.encode(f"check</think><answer>{self.answers[b]}</answer>")
            assert len(ids) <= N, "raise response_length for this script"
            toks[b, : len(ids)], lens[b] = ids, len(ids)
        cache_lens = np.where(active, np.asarray(cache_lens) + new_lens + np.maximum(lens - 1, 0), cache_lens)
        zeros = jnp.zeros((B, N))
        return SampleOutput(tokens=jnp.asarray(toks), lengths=jnp.asarray(lens), logprobs=zeros, raw_logprobs=zeros,
                            finish_reason=jnp.ones(B, jnp.int32), cache=cache, cache_lens=jnp.asarray(cache_lens))


def test_countdown_eval_with_a_scripted_policy_counts_successes(tmp_path):
    """Group 0 answers correctly, group 1 uses every number but misses the target (reward 0.1)."""
    from envs.countdown.generator import generate_task
    from envs.countdown.solver import solve
    from ragen_jax.trainer.evaluate import run_eval
    from ragen_jax.trainer import Trainer

    cfg = tiny_eval_config("countdown")
    cfg.rollout.response_length = 64
    cfg.rollout.engine = "lockstep"  # the scripted sampler stands in for Sampler.generate
    right = generate_task(cfg.val.seed, ops="+-")
    wrong = generate_task(cfg.val.seed + 1, ops="+-")
    assert sum(wrong.nums) != wrong.target
    answers = [solve(right.nums, right.target, "+-")] * 2 + [" + ".join(map(str, wrong.nums))] * 2
    trainer = Trainer(cfg, str(tmp_path))
    trainer.val_engine.sampler = ScriptedSampler(trainer.val_engine.sampler, trainer.tokenizer, answers)
    metrics = run_eval(trainer)
    records = read_jsonl(str(tmp_path / "eval" / "init" / "rollouts.jsonl"))
    check_eval_output(metrics, records, "Countdown", cfg)
    assert [r["metadata"]["success"] for r in records] == [True, True, False, False]
    assert [r["metadata"]["total_reward"] for r in records] == pytest.approx([1.0, 1.0, 0.1, 0.1])
    expected = {"success": 0.5, "pass_at_2": 0.5, "action_is_valid": 1.0, "num_actions": 1.0, "reward": 0.55,
                "format_penalty": 0.0}
    assert {k: metrics[f"val/Countdown/{k}"] for k in expected} == pytest.approx(expected)
    assert answers[0] in records[0]["messages"][2]["content"]


def test_validation_in_chunks_reports_the_metrics_of_the_episodes_it_keeps(tmp_path):
    """val.groups=3 in chunks of 2 groups: the last chunk plays a 4th group (seed 126) that is not kept. The metrics
    are those of the 6 kept episodes (all failures here), not a mean of chunk means that counts the extra group
    (which succeeds) and weighs the half-kept chunk as much as a full one."""
    from envs.countdown.generator import generate_task
    from envs.countdown.solver import solve
    from ragen_jax.trainer.evaluate import run_eval
    from ragen_jax.trainer import Trainer

    cfg = tiny_eval_config("countdown")
    cfg.val.groups, cfg.val.group_size, cfg.val.batch_size = 3, 2, 4
    cfg.rollout.response_length = 64
    cfg.rollout.engine = "lockstep"
    extra = generate_task(cfg.val.seed + 3, ops="+-")
    calls = [["1"] * 4, ["1"] * 2 + [solve(extra.nums, extra.target, "+-")] * 2]  # one call per chunk (one turn)

    class PerChunk(ScriptedSampler):
        def generate(self, *args, **kwargs):
            self.answers = calls.pop(0)
            return super().generate(*args, **kwargs)

    trainer = Trainer(cfg, str(tmp_path))
    trainer.val_engine.sampler = PerChunk(trainer.val_engine.sampler, trainer.tokenizer, [])
    metrics = run_eval(trainer)
    records = read_jsonl(str(tmp_path / "eval" / "init" / "rollouts.jsonl"))
    assert calls == [] and len(records) == 6 and metrics["eval/num_episodes"] == 6
    assert [r["metadata"]["seed"] for r in records] == [123, 123, 124, 124, 125, 125]
    assert not any(r["metadata"]["success"] for r in records)
    expected = {"success": 0.0, "pass_at_2": 0.0,
                "reward": sum(r["metadata"]["total_reward"] for r in records) / 6}
    assert {k: metrics[f"val/Countdown/{k}"] for k in expected} == pytest.approx(expected)
