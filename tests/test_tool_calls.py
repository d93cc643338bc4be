"""Tool calls in the Hermes / Qwen format: read from model text into calls, never half a reply; OpenAI messages put
into the shape chat templates render."""

import json

import pytest
from hypothesis import given, settings, strategies as st

from ragen_jax.tool_calls import ParsedToolCalls, ToolCall, format_tool_call, parse_tool_calls, template_message


def test_calls_and_the_text_around_them_are_read():
    text = ('Let me compute.\n<tool_call>\n{"name": "calculate", "arguments": {"expression": "2+2"}}\n</tool_call>'
            '<tool_call>{"name": "search", "arguments": "{\\"query\\": \\"x\\"}"}</tool_call>')
    parsed = parse_tool_calls(text, ["calculate", "search"])
    assert parsed.calls == (ToolCall("calculate", {"expression": "2+2"}), ToolCall("search", {"query": "x"}))
    assert parsed.content == "Let me compute." and parsed.problem == ""


def test_text_without_calls_is_content():
    assert parse_tool_calls("<answer>4</answer>", ["calculate"]) == ParsedToolCalls((), "<answer>4</answer>")


@pytest.mark.parametrize("text,needle", [
    ('<tool_call>{"name": "calculate", "arguments": {"expression": 2+2}}</tool_call>', "not valid JSON"),
    ('<tool_call>["calculate"]</tool_call>', 'non-empty string "name"'),
    ('<tool_call>{"name": "calculate", "arguments": [1]}</tool_call>', "must be a JSON object"),
    ('<tool_call>{"name": "calculate", "arguments": "{oops"}</tool_call>', "are not valid JSON"),
    ('<tool_call>{"name": "calculate", "arguments": {}}', "not closed"),
    ('<tool_call>{"name": "rm", "arguments": {}}</tool_call>', "'rm' was not offered"),
])
def test_a_bad_call_leaves_the_whole_text_as_content_with_the_reason(text, needle):
    good = '<tool_call>{"name": "calculate", "arguments": {}}</tool_call> '
    parsed = parse_tool_calls(good + text, ["calculate"])
    assert parsed.calls == () and parsed.content == good + text and needle in parsed.problem


@settings(max_examples=60, deadline=None)
@given(name=st.text(min_size=1, max_size=12).filter(lambda s: "<" not in s),
       arguments=st.dictionaries(st.text(max_size=8), st.one_of(st.integers(), st.text(max_size=8), st.booleans()),
                                 max_size=4))
def test_a_formatted_call_reads_back_as_itself(name, arguments):
    call = ToolCall(name, arguments)
    assert parse_tool_calls(format_tool_call(call)).calls == (call,)


def test_openai_messages_take_the_shape_templates_render():
    message = {"role": "assistant", "content": None, "tool_calls": [
        {"id": "call_1", "type": "function", "function": {"name": "calculate", "arguments": '{"expression": "1+1"}'}}]}
    out = template_message(message)
    assert out["content"] == "" and out["tool_calls"][0]["function"]["arguments"] == {"expression": "1+1"}
    assert out["tool_calls"][0]["id"] == "call_1" and message["tool_calls"][0]["function"]["arguments"] == \
        '{"expression": "1+1"}'  # the caller's message is left as it was
    parts = template_message({"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]})
    assert parts["content"] == "ab"
    with pytest.raises(ValueError, match="'image_url' is not supported"):
        template_message({"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]})
    with pytest.raises(ValueError, match="not JSON"):
        template_message({"role": "assistant", "tool_calls": [{"function": {"name": "f", "arguments": "{"}}]})
    assert json.dumps(template_message({"role": "tool", "content": "4", "tool_call_id": "call_1"})) == \
        '{"role": "tool", "content": "4", "tool_call_id": "call_1"}'
