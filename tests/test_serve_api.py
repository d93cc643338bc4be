"""The OpenAI-compatible endpoint's HTTP side, driven by the `openai` client on 127.0.0.1: requests checked into 400s
that name the field, prompts rendered by the model's own chat template (tools through its `tools=` argument), and
<tool_call> blocks answered as OpenAI `tool_calls`. The engine is a scripted stand-in (test_serve_engine.py runs the
real one)."""

import http.client
import json

import openai
import pytest

from ragen_jax.models import load_tiny_tokenizer
from envs.serve.asgi import AsgiServer
from ragen_jax.serve.app import create_app
from serve_testlib import CALCULATOR, TOOLS_TEMPLATE, ScriptedEngine, prompt_text

MODEL = "tiny-agent"


@pytest.fixture
def serve():
    """serve(texts, tools_template=True) -> (openai client, engine, url); every server is stopped after the test."""
    threads = []

    def start(texts=(), tools_template=True, **engine_kwargs):
        tokenizer = load_tiny_tokenizer()
        if tools_template:
            tokenizer.hf.chat_template = TOOLS_TEMPLATE
        engine = ScriptedEngine(tokenizer, texts, **engine_kwargs)
        thread = AsgiServer(create_app(engine, MODEL)).start()
        threads.append(thread)
        client = openai.OpenAI(base_url=thread.url + "/v1", api_key="unused", max_retries=0, timeout=30)
        return client, engine, thread.url

    yield start
    for thread in threads:
        thread.stop()


def _ask(client, **kwargs):
    return client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "What is 2+2?"}], **kwargs)


def test_models_lists_the_served_model(serve):
    client, _, _ = serve()
    assert [m.id for m in client.models.list().data] == [MODEL]
    assert client.models.retrieve(MODEL).id == MODEL
    with pytest.raises(openai.NotFoundError, match="does not exist"):
        client.models.retrieve("gpt-4")


def test_a_tool_call_is_answered_as_tool_calls_and_the_tools_reach_the_prompt(serve):
    call = '<tool_call>\n{"name": "calculate", "arguments": {"expression": "2+2"}}\n</tool_call>'
    client, engine, _ = serve([call], cache_size=1024)
    reply = _ask(client, tools=[CALCULATOR])
    choice = reply.choices[0]
    assert choice.finish_reason == "tool_calls" and choice.message.content is None
    [tool_call] = choice.message.tool_calls
    assert tool_call.type == "function" and tool_call.id.startswith("call_")
    assert (tool_call.function.name, json.loads(tool_call.function.arguments)) == ("calculate", {"expression": "2+2"})
    assert '"name": "calculate"' in prompt_text(engine.tokenizer, engine.jobs[0])  # listed by the template
    # the call and its result go back through the template: the next prompt holds both
    _ask_with = [{"role": "user", "content": "What is 2+2?"}, choice.message.model_dump(exclude_none=True),
                 {"role": "tool", "tool_call_id": tool_call.id, "content": "4"}]
    client.chat.completions.create(model=MODEL, messages=_ask_with, tools=[CALCULATOR])
    second = prompt_text(engine.tokenizer, engine.jobs[1])
    assert '{"name": "calculate", "arguments": {"expression": "2+2"}}' in second and "<tool_response>\n4\n" in second


@pytest.mark.parametrize("text", ['<tool_call>{"name": "calculate", "arguments": {2+2}}</tool_call>',
                                  '<tool_call>{"name": "delete_files", "arguments": {}}</tool_call>',
                                  '<tool_call>{"name": "calculate"'])
def test_a_malformed_or_unoffered_call_is_plain_content(serve, text):
    client, _, _ = serve([text], cache_size=1024)
    choice = _ask(client, tools=[CALCULATOR]).choices[0]
    assert choice.message.content == text and not choice.message.tool_calls and choice.finish_reason == "stop"


def test_without_tools_a_call_shaped_text_is_content(serve):
    text = '<tool_call>{"name": "calculate", "arguments": {}}</tool_call>'
    client, _, _ = serve([text, text], cache_size=1024)
    assert _ask(client).choices[0].message.content == text
    assert _ask(client, tools=[CALCULATOR], tool_choice="none").choices[0].message.content == text


def test_n_choices_and_usage(serve):
    client, engine, _ = serve(["one", "two"])
    reply = _ask(client, n=2, max_tokens=4, max_completion_tokens=5, seed=3, temperature=0.5, top_p=0.9, stop=["x"])
    assert [c.message.content for c in reply.choices] == ["one", "two"] and [c.index for c in reply.choices] == [0, 1]
    job = engine.jobs[0]
    assert (job.n, job.budget, job.stop, job.sampling.temperature, job.sampling.top_p) == (2, 5, ("x",), 0.5, 0.9)
    assert reply.usage.prompt_tokens == len(job.prompt) and reply.usage.completion_tokens == sum(
        len(engine.tokenizer.encode(t)) for t in ("one", "two"))
    assert _ask(client, temperature=0).choices[0].message.content == "ok"
    assert engine.jobs[1].sampling.greedy and not engine.jobs[1].sampling.ignore_eos
    _ask(client, extra_body={"ignore_eos": True})  # vLLM's extension
    assert engine.jobs[2].sampling.ignore_eos


@pytest.mark.parametrize("kwargs,needle", [
    ({"model": "gpt-4"}, "does not exist here"),
    ({"temperature": 3}, "'temperature' must be in [0, 2]"),
    ({"top_p": 0}, "'top_p' must be in (0, 1]"),
    ({"n": 5}, "'n' must be in [1, 4]"),
    ({"max_tokens": 0}, "'max_tokens' must be in"),
    ({"max_tokens": 17}, "at most 16 tokens"),
    ({"stop": [""]}, "'stop' must be"),
    ({"seed": 2**64}, "'seed' must be in"),
    ({"stream": True}, "'stream' is not supported"),
    ({"extra_body": {"ignore_eos": 1}}, "'ignore_eos' must be true or false"),
    ({"tool_choice": "required", "tools": [CALCULATOR]}, "'tool_choice' must be"),
    ({"tools": [{"type": "function", "function": {"description": "no name"}}]}, "tools[0] must be"),
    ({"messages": []}, "'messages' must be a non-empty list"),
    ({"messages": [{"role": "robot", "content": "x"}]}, "messages[0] must be"),
    ({"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}]},
     "'image_url' is not supported"),
    ({"messages": [{"role": "user", "content": "x " * 100}]}, "maximum context length is 64 tokens"),
    ({"max_tokens": 16, "messages": [{"role": "user", "content": "x " * 45}]}, "(54 in the messages, 16 in the"),
])
@pytest.mark.slow  # default run: too long for CI's 15 minutes on 2 cores
def test_bad_requests_are_400_naming_the_field(serve, kwargs, needle):
    client, engine, _ = serve()
    request = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], **kwargs}
    with pytest.raises(openai.BadRequestError) as caught:
        client.chat.completions.create(**request)
    assert needle in caught.value.body["message"] and caught.value.status_code == 400
    assert engine.jobs == []


def test_tools_a_template_cannot_show_are_refused(serve):
    client, engine, _ = serve(tools_template=False, cache_size=1024)  # the tiny tokenizer's own template ignores tools
    with pytest.raises(openai.BadRequestError, match="does not render tools"):
        _ask(client, tools=[CALCULATOR])
    assert engine.jobs == []


@pytest.mark.parametrize("body,status,needle", [
    (b'{"model": ', 400, "not valid JSON"), (b"[1, 2]", 400, "must be a JSON object"),
    (b'{"seed": ' + b"9" * 5000 + b"}", 400, "5000 digits"), (b"\xff\xfe", 400, "not valid JSON")])
def test_bodies_that_are_no_request_are_400(serve, body, status, needle):
    _, _, url = serve()
    conn = http.client.HTTPConnection(url.removeprefix("http://"), timeout=30)
    try:
        conn.request("POST", "/v1/chat/completions", body=body, headers={"Content-Type": "application/json"})
        response = conn.getresponse()
        answer = json.loads(response.read())
        assert response.status == status and needle in answer["error"]["message"]
        conn.request("GET", "/v1/nowhere")
        response = conn.getresponse()
        assert response.status == 404 and "error" in json.loads(response.read())
    finally:
        conn.close()
