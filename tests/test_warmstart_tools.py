"""Warm starts on host and tool envs: demonstrations from an env's scripted policy (HostEnv.scripted_action) in the
rollout's own format, the JSONL demonstrations' per-line checks (docs/running.md, Demonstrations), and the presets'
configs."""

import json

import numpy as np
import pytest

from configs import searchqa, webshop
from configs.countdown import get_config
from envs.batch import make_env_batch
from envs.countdown.tool_env import TOOLS
from ragen_jax.config import validate_config
from ragen_jax.models.tiny import load_tiny_tokenizer
from ragen_jax.rollout import RolloutConfig
from ragen_jax.warmstart.demo_jsonl import load_jsonl_demos, write_demo_jsonl
from ragen_jax.warmstart.demos import demo_rows
from ragen_jax.warmstart.scripted import has_scripted_policy, play_scripted_episodes


def _cfg(**kw):
    base = dict(max_turn=3, max_actions_per_turn=1, max_actions_per_traj=3, response_length=96, max_model_len=2048,
                enable_think=True, action_format="tool_call", context_mode="full")
    return RolloutConfig(**{**base, **kw})


@pytest.fixture(scope="module")
def tok():
    return load_tiny_tokenizer()


def test_scripted_tool_demos_solve_in_two_calls_and_train_only_the_replies(tok, tmp_path):
    cfg = _cfg()
    env = make_env_batch("ToolCountdown", 4)
    episodes = play_scripted_episodes(env, [0, 1, 2, 3], tok, cfg, reasoning_text="check then submit")
    assert all(ep.success and ep.num_turns == 2 and ep.penalty == 0 and not ep.error for ep in episodes)
    first = episodes[0].history[0].response_text
    assert first.startswith("<think>check then submit</think><tool_call>") and '"calculate"' in first
    rows = demo_rows(episodes, tok, cfg)
    assert rows.num_rows == 4
    for i, ep in enumerate(episodes):
        sampled = [t for r in ep.history if r.response_tokens is not None for t in r.response_tokens]
        assert rows.tokens[i][rows.loss_mask[i] > 0].tolist() == sampled  # tool results and prompts: context
    # written as JSONL (with the tools) and read back: the same rows, token for token
    path = write_demo_jsonl(str(tmp_path / "demos.jsonl"), episodes, cfg)
    assert json.loads(open(path).readline())["tools"] == TOOLS
    back = load_jsonl_demos(path, tok, cfg)
    np.testing.assert_array_equal(back.tokens[:, :rows.tokens.shape[1]], rows.tokens)
    np.testing.assert_array_equal(back.loss_mask[:, :rows.tokens.shape[1]], rows.loss_mask)


def test_scripted_search_demos_search_then_answer(tok):
    cfg = _cfg(enable_think=False, max_model_len=4096)
    env = make_env_batch("ToolSearchQA", 2, top_k=2, max_doc_chars=200)
    episodes = play_scripted_episodes(env, [0, 1], tok, cfg)
    for ep in episodes:
        assert ep.success and ep.num_turns == 2 and ep.env_reward == 1.0
        assert '"name": "search"' in ep.history[0].response_text and "[Document 1]" in ep.history[1].state
        assert "search[" not in ep.history[0].state  # the text actions' line is gone: the tools replace it


def test_only_envs_with_a_script_play_demos():
    from envs.countdown.env import CountdownEnv
    from envs.countdown.tool_env import ToolCountdownEnv

    assert has_scripted_policy(ToolCountdownEnv) and not has_scripted_policy(CountdownEnv)


SYSTEM = {"role": "system", "content": "S"}
USER = {"role": "user", "content": "Target: 3, nums: [1, 2]"}
GOOD = {"role": "assistant", "content": '<tool_call>{"name": "submit", "arguments": {"expression": "1 + 2"}}'
                                        '</tool_call>'}


@pytest.mark.parametrize("line,needle", [
    ("{not json", "line 2 is not JSON"),
    (json.dumps({"messages": []}), 'expected {"messages"'),
    (json.dumps({"messages": [SYSTEM, USER, GOOD]}), 'needs "tools"'),
    (json.dumps({"tools": TOOLS, "messages": [SYSTEM, {"role": "robot", "content": "x"}, GOOD]}),
     "each message needs a role (system|user|assistant|tool)"),
    (json.dumps({"tools": TOOLS, "messages": [SYSTEM, {**USER, "weight": 1}, GOOD]}), "only assistant messages"),
    (json.dumps({"tools": TOOLS, "messages": [SYSTEM, USER, {**GOOD, "weight": 0.5}]}), "weight is 0"),
    (json.dumps({"tools": TOOLS, "messages": [SYSTEM, USER, {**GOOD, "weight": 0}]}), "no assistant message to train"),
    (json.dumps({"tools": TOOLS, "messages": [SYSTEM, USER, {"role": "assistant", "content": "", "tool_calls": [
        {"type": "function", "function": {"name": "submit", "arguments": "{}"}}]}]}), "not as \"tool_calls\""),
])
def test_each_bad_demonstration_line_is_refused_with_its_number_and_fix(tok, tmp_path, line, needle):
    path = tmp_path / "demos.jsonl"
    good = json.dumps({"tools": TOOLS, "messages": [SYSTEM, USER, GOOD]})
    path.write_text(good + "\n" + line + "\n")
    with pytest.raises(ValueError) as info:
        load_jsonl_demos(str(path), tok, _cfg(enable_think=False))
    assert needle in str(info.value) and "line 2" in str(info.value)


def test_a_good_tool_demonstration_trains_its_reply_only(tok, tmp_path):
    path = tmp_path / "demos.jsonl"
    tool = {"role": "tool", "content": "1 + 2 = 3"}
    path.write_text(json.dumps({"tools": TOOLS, "messages": [SYSTEM, USER, {**GOOD, "weight": 0}, tool, GOOD]}) + "\n")
    rows = load_jsonl_demos(str(path), tok, _cfg(enable_think=False))
    trained = tok.decode(rows.tokens[0][rows.loss_mask[0] > 0].tolist())
    assert trained == GOOD["content"]
    with pytest.raises(ValueError, match="rollout.action_format='answer'"):
        load_jsonl_demos(str(path), tok, _cfg(enable_think=False, action_format="answer"))


@pytest.mark.parametrize("variant", ["tiny_tool", "tool"])
@pytest.mark.parametrize("module", ["countdown", "searchqa", "webshop"])
def test_the_tool_presets_are_valid_configs(module, variant):
    cfg = {"countdown": get_config, "searchqa": searchqa.get_config, "webshop": webshop.get_config}[module](variant)
    validate_config(cfg)
    assert cfg.env.name.startswith("Tool") and cfg.rollout.action_format == "tool_call"
    if module == "webshop":  # no scripted policy: its warm start needs a JSONL of demonstrations
        cfg.warmstart.enabled = True
        with pytest.raises(ValueError, match="without scripted_action"):
            validate_config(cfg)
        return
    cfg.warmstart.enabled, cfg.warmstart.source = True, "oracle"  # the scripted demos are allowed on it
    validate_config(cfg)
    cfg.warmstart.source = "random"
    with pytest.raises(ValueError, match="is a host env without scripted_action"):
        validate_config(cfg)
