"""Tool calls in the Hermes / Qwen chat format: `<tool_call>{"name": ..., "arguments": {...}}</tool_call>` blocks
in a model's text, read into OpenAI's `tool_calls` shape, and OpenAI messages put back into the shape chat templates
render (`arguments` a dict, not JSON text).

Pure functions over text and JSON values, shared by the OpenAI-compatible endpoint (ragen_jax.serve) and any rollout
that takes tool calls as actions.
"""

from __future__ import annotations

import dataclasses
import json
import re
from typing import Any, Iterable, Mapping

OPEN, CLOSE = "<tool_call>", "</tool_call>"
_BLOCK = re.compile(re.escape(OPEN) + r"(.*?)" + re.escape(CLOSE), re.DOTALL)


@dataclasses.dataclass(frozen=True)
class ToolCall:
    """One call: the tool's name and its arguments (a JSON object)."""

    name: str
    arguments: dict[str, Any]


@dataclasses.dataclass(frozen=True)
class ParsedToolCalls:
    """What a model's text holds: `calls` (empty when it called nothing or a call was unreadable), `content` (the
    text outside the calls; the whole text when `problem` is set) and `problem` ("" when every block was read)."""

    calls: tuple[ToolCall, ...]
    content: str
    problem: str = ""


def parse_tool_calls(text: str, tool_names: Iterable[str] | None = None) -> ParsedToolCalls:
    """Read the `<tool_call>` blocks of `text`. A block that is not a JSON object with a string "name" and an object
    "arguments" (or JSON text of one), an opened block never closed, or a name outside `tool_names` (when given)
    makes the whole text plain content, with the reason in `problem`: the caller never acts on half a reply."""
    if OPEN not in text:
        return ParsedToolCalls((), text)
    known = None if tool_names is None else set(tool_names)
    blocks, rest = _blocks(text)
    calls = []
    for block in blocks:
        call, problem = _read_call(block.strip())
        if not problem and known is not None and call.name not in known:
            offered = ", ".join(sorted(known)) or "none"
            problem = f"tool {call.name!r} was not offered (offered: {offered})"
        if problem:
            return ParsedToolCalls((), text, problem)
        calls.append(call)
    if OPEN in rest or CLOSE in rest:
        return ParsedToolCalls((), text, f"a {OPEN} block is not closed by {CLOSE}")
    return ParsedToolCalls(tuple(calls), rest.strip())


def _blocks(text: str) -> tuple[list[str], str]:
    """(the inside of each OPEN...CLOSE block, the text outside them), as `_BLOCK.findall` and `_BLOCK.sub` would
    give them, in time linear in the text (the lazy regex rescans the rest of the text from every unclosed OPEN:
    quadratic on a reply of many OPENs)."""
    blocks, outside, pos = [], [], 0
    while (start := text.find(OPEN, pos)) >= 0:
        end = text.find(CLOSE, start + len(OPEN))
        if end < 0:
            break
        outside.append(text[pos:start])
        blocks.append(text[start + len(OPEN):end])
        pos = end + len(CLOSE)
    outside.append(text[pos:])
    return blocks, "".join(outside)


def _read_call(block: str) -> tuple[ToolCall | None, str]:
    try:
        data = json.loads(block)
    except (ValueError, RecursionError) as e:
        return None, f"a tool call is not valid JSON ({e})"
    if not isinstance(data, dict) or not isinstance(data.get("name"), str) or not data["name"]:
        return None, 'a tool call must be a JSON object with a non-empty string "name"'
    arguments = data.get("arguments", data.get("parameters", {}))
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments)
        except (ValueError, RecursionError) as e:
            return None, f"the arguments of tool call {data['name']!r} are not valid JSON ({e})"
    if not isinstance(arguments, dict):
        return None, f"the arguments of tool call {data['name']!r} must be a JSON object, got {type(arguments).__name__}"
    return ToolCall(data["name"], arguments), ""


def format_tool_call(call: ToolCall) -> str:
    """The text of one call in the same format (what a model trained on it writes)."""
    return f"{OPEN}\n{json.dumps({'name': call.name, 'arguments': call.arguments}, ensure_ascii=False)}\n{CLOSE}"


def template_message(message: Mapping[str, Any]) -> dict[str, Any]:
    """An OpenAI chat message in the shape chat templates render: text parts joined into one string, and each
    assistant tool call's `function.arguments` JSON text read into a dict (Qwen's and Llama's templates write it
    with `tojson`). ValueError names what cannot be rendered."""
    out = dict(message)
    content = out.get("content")
    if isinstance(content, list):
        texts = []
        for part in content:
            if not (isinstance(part, Mapping) and part.get("type") == "text" and isinstance(part.get("text"), str)):
                kind = part.get("type") if isinstance(part, Mapping) else type(part).__name__
                raise ValueError(f"content part of type {kind!r} is not supported; send text parts only")
            texts.append(part["text"])
        out["content"] = "".join(texts)
    elif content is None:
        out["content"] = ""
    elif not isinstance(content, str):
        raise ValueError(f"content must be a string or a list of text parts, got {type(content).__name__}")
    if out.get("tool_calls"):
        out["tool_calls"] = [_template_call(call) for call in out["tool_calls"]]
    return out


def _template_call(call: Any) -> dict[str, Any]:
    function = call.get("function") if isinstance(call, Mapping) else None
    if not isinstance(function, Mapping) or not isinstance(function.get("name"), str):
        raise ValueError('each tool call needs {"type": "function", "function": {"name": ..., "arguments": ...}}')
    arguments = function.get("arguments", {})
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments) if arguments.strip() else {}
        except ValueError as e:
            raise ValueError(f"the arguments of tool call {function['name']!r} are not JSON ({e})") from None
    return {**call, "type": "function", "function": {"name": function["name"], "arguments": arguments}}


_JSON_TYPES = {"string": (str,), "integer": (int,), "number": (int, float), "boolean": (bool,), "array": (list,),
               "object": (dict,), "null": (type(None),)}


def tool_name(schema: Mapping[str, Any]) -> str:
    """The name of a tool schema in OpenAI's shape ({"type": "function", "function": {"name": ...}}) or bare."""
    return str(schema.get("function", schema)["name"])


def argument_problem(schema: Mapping[str, Any], arguments: Mapping[str, Any]) -> str:
    """Why `arguments` do not fit a tool's JSON schema ("" when they do): a missing required argument, one the
    schema does not declare (unless it allows additionalProperties), a top-level value of the wrong JSON type or
    outside its enum. Only the top level is checked: the tool itself judges nested values."""
    function = schema.get("function", schema)
    name = function.get("name", "?")
    parameters = function.get("parameters") or {}
    properties = parameters.get("properties") or {}
    missing = [key for key in parameters.get("required", ()) if key not in arguments]
    if missing:
        return f"tool {name!r} needs the argument(s) {', '.join(map(repr, missing))}"
    if properties and parameters.get("additionalProperties") is not True:
        unknown = sorted(set(arguments) - set(properties))
        if unknown:
            return (f"tool {name!r} takes no argument(s) {', '.join(map(repr, unknown))} "
                    f"(it takes {', '.join(map(repr, properties))})")
    for key, value in arguments.items():
        spec = properties.get(key) or {}
        kinds = spec.get("type")
        kinds = [kinds] if isinstance(kinds, str) else list(kinds or ())
        allowed = tuple(t for k in kinds for t in _JSON_TYPES.get(k, ()))
        wrong_bool = isinstance(value, bool) and "boolean" not in kinds  # a bool is an int in Python, not in JSON
        if allowed and (not isinstance(value, allowed) or wrong_bool):
            return f"argument {key!r} of tool {name!r} must be of JSON type {' or '.join(kinds)}, got {value!r:.60}"
        if "enum" in spec and value not in spec["enum"]:
            return f"argument {key!r} of tool {name!r} must be one of {spec['enum']}, got {value!r:.60}"
    return ""


def tools_text(tools: Iterable[Mapping[str, Any]]) -> str:
    """The tools as a system-prompt block, for a chat template that does not render `tools=` itself: one JSON
    schema a line, and how to call them (the format `parse_tool_calls` reads)."""
    lines = "\n".join(json.dumps(dict(t), ensure_ascii=False) for t in tools)
    return (f"\n\nTools you can call (JSON schemas, one a line):\n{lines}\n"
            f'Call a tool by writing {OPEN}{{"name": "<tool name>", "arguments": {{<arguments>}}}}{CLOSE}.')
