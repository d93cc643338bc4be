"""OpenAI chat completions: a request body checked into a `ChatRequest`, its prompt rendered by the model's own chat
template (tools through the template's `tools=` argument), and completions written back as OpenAI's response.

Every problem with a request is a `RequestError` (answered 400) naming the field and what to send instead.
"""

from __future__ import annotations

import dataclasses
import json
import math
import time
import uuid
from typing import Any, Mapping, Sequence

from ragen_jax.serve.engine import Completion, Sampling
from ragen_jax.tool_calls import parse_tool_calls, template_message

ROLES = ("system", "developer", "user", "assistant", "tool")
MAX_STOP_STRINGS = 16
# Parameters whose non-default values would change the answer in a way this server does not provide: refused, never
# silently ignored.
UNSUPPORTED = {"stream": False, "logprobs": False, "top_logprobs": None, "frequency_penalty": 0, "presence_penalty": 0,
               "logit_bias": None, "audio": None, "prediction": None, "modalities": None}


class RequestError(ValueError):
    """A bad request: answered 400 with OpenAI's error body (`param`: the field at fault)."""

    def __init__(self, message: str, param: str | None = None, code: str | None = None, status: int = 400):
        super().__init__(message)
        self.message, self.param, self.code, self.status = message, param, code, status


@dataclasses.dataclass(frozen=True)
class ChatRequest:
    """A checked chat completion request. max_tokens None: as many as fit (up to the server's cap)."""

    model: str
    messages: tuple[dict[str, Any], ...]
    tools: tuple[dict[str, Any], ...] = ()
    n: int = 1
    max_tokens: int | None = None
    sampling: Sampling = Sampling()
    stop: tuple[str, ...] = ()
    seed: int | None = None
    template_kwargs: dict[str, Any] = dataclasses.field(default_factory=dict)

    @property
    def tool_names(self) -> list[str]:
        return [t["function"]["name"] for t in self.tools]


def _number(body: Mapping[str, Any], key: str, default: float, low: float, high: float, *, low_open: bool = False
            ) -> float:
    value = body.get(key)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise RequestError(f"'{key}' must be a number, got {json.dumps(value)[:40]}.", key)
    if value < low or value > high or (low_open and value == low):
        bracket = "(" if low_open else "["
        raise RequestError(f"'{key}' must be in {bracket}{low:g}, {high:g}], got {value}.", key)
    return float(value)


def _integer(body: Mapping[str, Any], key: str, low: int, high: int) -> int | None:
    value = body.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise RequestError(f"'{key}' must be an integer, got {json.dumps(value)[:40]}.", key)
    if not low <= value <= high:
        raise RequestError(f"'{key}' must be in [{low}, {high}], got {value}.", key)
    return value


def parse_chat_request(body: Mapping[str, Any], *, model: str, slots: int) -> ChatRequest:
    """A request body -> ChatRequest, or RequestError naming the first problem. `model`: the one model served;
    `slots`: the most choices (n) one request may ask for."""
    name = body.get("model")
    if not isinstance(name, str) or not name:
        raise RequestError(f"'model' is required: send \"model\": \"{model}\".", "model")
    if name != model:
        raise RequestError(f"The model {name!r} does not exist here; this server serves {model!r} (GET /v1/models).",
                           "model", "model_not_found")
    for key, default in UNSUPPORTED.items():
        if body.get(key) not in (None, default, [], {}):
            raise RequestError(f"'{key}' is not supported by this server; leave it out (or send {json.dumps(default)}).",
                               key, "unsupported_parameter")
    fmt = body.get("response_format")
    if fmt is not None and not (isinstance(fmt, Mapping) and fmt.get("type") == "text"):
        raise RequestError("'response_format' other than {\"type\": \"text\"} is not supported.", "response_format",
                           "unsupported_parameter")
    temperature = _number(body, "temperature", 1.0, 0.0, 2.0)
    top_p = _number(body, "top_p", 1.0, 0.0, 1.0, low_open=True)
    top_k = _integer(body, "top_k", -1, 1 << 20) or 0  # vLLM's extension; -1 and 0 are off
    ignore_eos = body.get("ignore_eos", False)  # vLLM's extension (benchmarks: every choice gets max_tokens)
    if not isinstance(ignore_eos, bool):
        raise RequestError("'ignore_eos' must be true or false.", "ignore_eos")
    n = _integer(body, "n", 1, slots) or 1
    newer = body.get("max_completion_tokens")  # OpenAI's newer name; either is read
    max_tokens = _integer({"max_tokens": body.get("max_tokens") if newer is None else newer}, "max_tokens", 1, 1 << 30)
    seed = _integer(body, "seed", -(2**63), 2**63 - 1)
    tools, use_tools = _tools(body)
    kwargs = body.get("chat_template_kwargs") or {}
    if not isinstance(kwargs, Mapping):
        raise RequestError("'chat_template_kwargs' must be an object, e.g. {\"enable_thinking\": false}.",
                           "chat_template_kwargs")
    return ChatRequest(model=name, messages=_messages(body.get("messages")), tools=tools if use_tools else (), n=n,
                       max_tokens=max_tokens, sampling=Sampling.of(temperature, top_p, top_k, ignore_eos),
                       stop=_stop(body), seed=seed, template_kwargs=dict(kwargs))


def _messages(messages: Any) -> tuple[dict[str, Any], ...]:
    if not isinstance(messages, list) or not messages:
        raise RequestError("'messages' must be a non-empty list of {\"role\": ..., \"content\": ...} objects.",
                           "messages")
    out = []
    for i, message in enumerate(messages):
        where = f"messages[{i}]"
        if not isinstance(message, Mapping) or message.get("role") not in ROLES:
            raise RequestError(f"{where} must be an object whose 'role' is one of {', '.join(ROLES)}.", where)
        if message["role"] != "assistant" and message.get("content") is None:
            raise RequestError(f"{where} ({message['role']}) needs 'content'.", where)
        try:
            rendered = template_message(message)
        except ValueError as e:
            raise RequestError(f"{where}: {e}.", where) from None
        if rendered["role"] == "developer":  # OpenAI's newer name for the system message
            rendered["role"] = "system"
        out.append(rendered)
    return tuple(out)


def _tools(body: Mapping[str, Any]) -> tuple[tuple[dict[str, Any], ...], bool]:
    """(the offered tools, whether the model may call them: tool_choice "auto", the default, or "none")."""
    tools = body.get("tools") or []
    if not isinstance(tools, list):
        raise RequestError("'tools' must be a list of {\"type\": \"function\", \"function\": {...}} objects.", "tools")
    for i, tool in enumerate(tools):
        function = tool.get("function") if isinstance(tool, Mapping) else None
        if (not isinstance(tool, Mapping) or tool.get("type", "function") != "function" or not isinstance(function, Mapping)
                or not isinstance(function.get("name"), str) or not function["name"]
                or not isinstance(function.get("parameters", {}), Mapping)):
            raise RequestError(f"tools[{i}] must be {{\"type\": \"function\", \"function\": {{\"name\": ..., "
                               "\"description\": ..., \"parameters\": {JSON schema}}}.", f"tools[{i}]")
    choice = body.get("tool_choice")
    if choice not in (None, "auto", "none"):
        raise RequestError("'tool_choice' must be \"auto\" or \"none\" here (a forced or required call is not "
                           "supported).", "tool_choice", "unsupported_parameter")
    return tuple({"type": "function", "function": dict(t["function"])} for t in tools), choice != "none"


def _stop(body: Mapping[str, Any]) -> tuple[str, ...]:
    stop = body.get("stop")
    if stop is None:
        return ()
    stops = [stop] if isinstance(stop, str) else stop
    if (not isinstance(stops, list) or len(stops) > MAX_STOP_STRINGS
            or not all(isinstance(s, str) and s for s in stops)):
        raise RequestError(f"'stop' must be a non-empty string or a list of at most {MAX_STOP_STRINGS} of them.",
                           "stop")
    return tuple(stops)


def render_prompt(tokenizer, request: ChatRequest) -> list[int]:
    """The prompt's token ids: the tokenizer's chat template over the messages (and tools), with the assistant's
    generation prompt. RequestError when the template refuses the conversation, or ignores the tools offered (the
    model would answer without seeing them)."""
    hf = tokenizer.hf
    if not getattr(hf, "chat_template", None):
        raise RequestError("The served model's tokenizer has no chat template.", status=500)

    def render(tools) -> str:
        try:
            return hf.apply_chat_template(list(request.messages), tools=list(tools) or None, tokenize=False,
                                          add_generation_prompt=True, **request.template_kwargs)
        except Exception as e:  # noqa: BLE001 - jinja raises the template's own errors (e.g. role order)
            raise RequestError(f"The model's chat template refused the messages: {type(e).__name__}: {e}",
                               "messages") from None

    text = render(request.tools)
    if request.tools and text == render(()):
        raise RequestError("The served model's chat template does not render tools, so the model would never see "
                           "them; send the request without 'tools' or serve a model whose template lists them.",
                           "tools", "unsupported_parameter")
    return tokenizer.encode(text)


def choice_message(completion: Completion, request: ChatRequest) -> tuple[dict[str, Any], str]:
    """(the assistant message, its finish reason) of one completion: tool calls read from its text when tools were
    offered (a malformed or unoffered call leaves the whole text as content)."""
    if request.tools:
        parsed = parse_tool_calls(completion.text, request.tool_names)
        if parsed.calls:
            calls = [{"id": f"call_{uuid.uuid4().hex[:24]}", "type": "function",
                      "function": {"name": c.name, "arguments": json.dumps(c.arguments, ensure_ascii=False)}}
                     for c in parsed.calls]
            return {"role": "assistant", "content": parsed.content or None, "tool_calls": calls}, "tool_calls"
    return {"role": "assistant", "content": completion.text}, completion.finish_reason


def completion_body(request: ChatRequest, completions: Sequence[Completion], prompt_tokens: int) -> dict[str, Any]:
    """OpenAI's `chat.completion` object."""
    choices = []
    for i, completion in enumerate(completions):
        message, finish = choice_message(completion, request)
        choices.append({"index": i, "message": message, "finish_reason": finish, "logprobs": None})
    used = sum(len(c.tokens) for c in completions)
    return {"id": f"chatcmpl-{uuid.uuid4().hex}", "object": "chat.completion", "created": int(time.time()),
            "model": request.model, "choices": choices, "system_fingerprint": None,
            "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": used, "total_tokens": prompt_tokens + used}}
