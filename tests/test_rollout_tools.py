"""Tool calls as actions (`rollout.action_format="tool_call"`): the parser's failure paths, argument checks against
a tool's schema, and a scripted multi-turn ToolCountdown episode through the lockstep engine: tools listed by the
chat template, results back in its tool role, an invalid call penalised with its reason, and only the sampled
tokens trained (tool results are context)."""

import json

import jax
import numpy as np
import pytest
from flax import nnx

from envs.batch import make_env_batch
from envs.countdown.tool_env import TOOLS, ToolCountdownEnv
from envs.host_batch import HostEnvBatch
from envs.protocols import ToolEnv, missing_methods
from ragen_jax.models.tiny import make_tiny_model
from ragen_jax.rollout import LockstepEngine, RolloutConfig
from ragen_jax.rollout.context import ContextBuilder
from ragen_jax.rollout.parsing import parse_tool_response
from ragen_jax.tool_calls import ToolCall, argument_problem
from serve_testlib import TOOLS_TEMPLATE
from test_rollout_engine import ScriptedSampler


def _call(name, **arguments):
    return f"<tool_call>{json.dumps({'name': name, 'arguments': arguments})}</tool_call>"


@pytest.mark.parametrize("text,needle", [
    ("<tool_call>{bad json</tool_call>", "not valid JSON"),
    ('<tool_call>{"name": "divide", "arguments": {}}</tool_call>', "'divide' was not offered"),
    ('<tool_call>{"name": "submit", "arguments": {}}</tool_call>', "needs the argument(s) 'expression'"),
    ('<tool_call>{"name": "submit", "arguments": {"expression": 7}}</tool_call>', "must be of JSON type string"),
    ('<tool_call>{"name": "submit", "arguments": {"expression": "1", "x": 2}}</tool_call>', "takes no argument(s) 'x'"),
    ('<tool_call>{"name": "submit", "arguments": [1]}</tool_call>', "must be a JSON object"),
    ('<tool_call>{"name": "submit", "arguments": {"expression": "1"}}', "not closed"),
    ("I think the answer is 4", "no <tool_call>"),
    ("<tool_call>" * 10_000, "not closed"),
    ('<tool_call>' + "[" * 100_000 + '</tool_call>', "not valid JSON"),
])
def test_a_malformed_or_unfitting_call_is_an_invalid_action_with_its_reason(text, needle):
    parsed = parse_tool_response(text, tools=TOOLS, max_calls=1, enable_think=False)
    assert parsed.actions == () and not parsed.turn_is_valid and needle in parsed.problem


def test_a_call_that_fits_is_the_action_and_thinking_must_close_first():
    good = _call("calculate", expression="2 + 3")
    parsed = parse_tool_response("<think>add</think>" + good + good, tools=TOOLS, max_calls=1)
    assert parsed.turn_is_valid and parsed.think == "add"
    assert parsed.actions == (ToolCall("calculate", {"expression": "2 + 3"}),)  # the first max_calls calls
    unclosed = parse_tool_response("<think>add " + good, tools=TOOLS, max_calls=1)
    assert not unclosed.turn_is_valid and "</think>" in unclosed.problem


def test_argument_types_follow_json_not_python():
    schema = {"name": "f", "parameters": {"type": "object", "properties": {
        "n": {"type": "integer"}, "x": {"type": "number"}, "mode": {"type": "string", "enum": ["a", "b"]}}}}
    assert argument_problem(schema, {"n": 3, "x": 2, "mode": "a"}) == ""
    assert "integer" in argument_problem(schema, {"n": True})  # a bool is no JSON integer
    assert "integer" in argument_problem(schema, {"n": 2.5})
    assert "one of" in argument_problem(schema, {"mode": "c"})


def test_tool_countdown_is_a_complete_tool_env_and_its_script_solves_it():
    assert missing_methods(ToolCountdownEnv) == []
    env = ToolCountdownEnv()
    env.reset(5)
    rewards = []
    while (action := env.scripted_action()) is not None:
        text, reward, done, info = env.call(action.name, action.arguments)
        rewards.append(reward)
        if done:
            break
    assert rewards == [0.0, 1.0] and info["success"]
    # in the answer format (and over envs.serve) a call arrives as text
    text, reward, terminated, truncated, info = env.step('{"name": "calculate", "arguments": {"expression": "2*"}}')
    assert not terminated and info["action_is_valid"] is False and "Error" in text
    assert env.step("nonsense")[4]["action_in_lookup"] is False


@pytest.fixture(scope="module")
def tiny():
    model, tok = make_tiny_model(seed=0)
    graphdef, params = nnx.split(model)
    tok.hf.chat_template = TOOLS_TEMPLATE  # renders tools= and the tool role (the tiny template ignores both)
    return graphdef, params, tok


def _cfg(**kw):
    base = dict(max_turn=3, max_actions_per_turn=1, max_actions_per_traj=3, response_length=96, max_model_len=2048,
                enable_think=False, action_format="tool_call", context_mode="full")
    return RolloutConfig(**{**base, **kw})


def test_a_scripted_tool_episode_plays_turns_and_trains_only_the_sampled_tokens(tiny):
    graphdef, params, tok = tiny
    cfg = _cfg()
    env = make_env_batch("ToolCountdown", 2)
    env.reset([7, 7])
    solution = env.envs[0].scripted_action().arguments["expression"]
    script = [[_call("calculate", expression=solution), '<tool_call>{"name": "calculate"</tool_call>'],
              [_call("submit", expression=solution), _call("calculate", expression="1 +")],
              ["unused", _call("submit", expression="1")]]
    engine = LockstepEngine(graphdef, tok, cfg, batch_size=2)
    engine.sampler = ScriptedSampler(engine.sampler, tok, script)
    res = engine.run(params, env, [7, 7], [0, 0], jax.random.PRNGKey(0), tag="ToolCountdown")
    solved, fumbled = res.episodes
    assert solved.success and solved.num_turns == 2 and solved.env_reward == 1.0 and solved.penalty == 0
    assert fumbled.num_turns == 3 and not fumbled.success and fumbled.penalty == pytest.approx(cfg.format_penalty)
    assert "not valid JSON" in fumbled.history[0].tool_error and fumbled.history[1].tool_error == ""
    # the tools reach the prompt through the template; the calculator's result comes back in its tool role
    first = tok.decode(solved.history[0].context_tokens.tolist())
    assert "# Tools" in first and '"name": "submit"' in first
    second = tok.decode(solved.history[1].context_tokens.tolist())
    assert f"<tool_response>\n{solution} = " in second
    # the invalid call got no tool run: the reason comes back as a user message
    assert "held no valid tool call: a tool call is not valid JSON" in tok.decode(
        fumbled.history[1].context_tokens.tolist())
    assert "<tool_response>\nError:" in tok.decode(fumbled.history[2].context_tokens.tolist())
    for b, ep in enumerate(res.episodes):  # "full": one row per episode, its sampled tokens trained, nothing else
        row, mask = res.batch.tokens[b], res.batch.loss_mask[b] > 0
        sampled = [t for r in ep.history if r.response_tokens is not None for t in r.response_tokens]
        assert row[mask].tolist() == sampled
        context = tok.decode(row[res.batch.attention_mask[b] & ~mask].tolist())
        assert "<tool_response>" in context and "# Tools" in context
    assert res.metrics["ToolCountdown/success"] == pytest.approx(0.5)


def test_a_template_without_tools_gets_them_in_the_system_message():
    _, tok = make_tiny_model(seed=0)  # the tiny tokenizer's own template ignores tools=
    builder = ContextBuilder(tok, enable_think=False, action_format="tool_call")
    messages = [{"role": "system", "content": "S", "tools": TOOLS}, {"role": "user", "content": "U"}]
    text = tok.decode(builder.assemble(messages, add_generation_prompt=True)[0].tolist())
    assert not builder.template_renders_tools(TOOLS) and '"name": "calculate"' in text and "<tool_call>" in text
    assert builder.generation_suffix == ""


def test_tool_calls_need_a_tool_env_and_a_chat_context(tiny):
    with pytest.raises(ValueError, match="context_mode to 'full' or 'limited_multi_turn'"):
        _cfg(context_mode="single_turn")
    graphdef, params, tok = tiny
    engine = LockstepEngine(graphdef, tok, _cfg(), batch_size=2)
    with pytest.raises(ValueError, match="needs an env with tools"):
        engine.run(params, make_env_batch("Countdown", 2), [1, 1], [0, 0], jax.random.PRNGKey(0), tag="Countdown")


def test_a_tool_call_to_an_env_without_tools_ends_only_that_episode():
    batch = HostEnvBatch([ToolCountdownEnv(), ToolCountdownEnv()])
    assert isinstance(batch.envs[0], ToolEnv) and batch.tools == TOOLS
    batch.reset([1, 2])
    result = batch.step([[ToolCall("calculate", {"expression": "1 + 2"})], []], np.array([True, True]))
    assert result.observations[0] == "1 + 2 = 3" and not result.terminated.any()
    plain = make_env_batch("Countdown", 1)
    plain.reset([1])
    result = plain.step([[ToolCall("submit", {"expression": "1"})]], np.array([True]))
    assert result.terminated[0] and "no ToolEnv" in result.errors[0]


@pytest.mark.slow  # two run.py processes on the tiny model: minutes on a CPU
def test_the_tiny_tool_preset_trains_and_evaluates(tmp_path):
    import os
    import subprocess
    import sys

    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = {**os.environ, "JAX_PLATFORMS": "cpu", "TOKENIZERS_PARALLELISM": "false", "HF_HUB_OFFLINE": "1"}
    small = ["--config=configs/countdown.py:tiny_tool", "--config.env.groups=2", "--config.env.group_size=2",
             "--config.trainer.mini_batch_size=4", "--config.trainer.micro_batch_size=4", "--config.val.groups=4",
             "--config.val.batch_size=4",
             f"--workdir={tmp_path / 'run'}"]
    for mode, extra in (("train", ["--config.trainer.total_steps=1"]), ("eval", [])):
        proc = subprocess.run([sys.executable, "run.py", f"--mode={mode}", *small, *extra], cwd=root, env=env,
                              capture_output=True, text=True, timeout=900)
        assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
    assert os.path.isdir(tmp_path / "run" / "checkpoints")
