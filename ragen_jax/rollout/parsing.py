"""Parse a model response into actions, as RAGEN does (think/answer tags, `||` separator).

The parser never raises and runs in time linear in the response: it must survive any text a
policy can produce (unclosed or nested tags, unicode, megabytes of output).
"""

from __future__ import annotations

import dataclasses
import re
from typing import Any, Mapping, Sequence

from ragen_jax.tool_calls import CLOSE, OPEN, argument_problem, parse_tool_calls, tool_name

ACTION_SEP = "||"
SPECIAL_TOKENS = ("<think>", "</think>", "<answer>", "</answer>", "<|im_start|>", "<|im_end|>")
# The reference patterns. `_match_think_answer` computes the same match in linear time (a
# backtracking regex is quadratic on adversarial text such as "<think></think>" * 100_000).
THINK_ANSWER_PATTERN = re.compile(r"<think>(.*?)</think>\s*<answer>(.*?)</answer>", re.DOTALL)
ANSWER_ONLY_PATTERN = re.compile(r"<answer>(.*?)</answer>", re.DOTALL)
# Linear: each `</think>` starts one attempt whose `\s*` run ends at the next non-space.
_CLOSE_THINK_THEN_ANSWER = re.compile(r"</think>\s*<answer>")


@dataclasses.dataclass(frozen=True)
class ParsedResponse:
    """A response split into reasoning and actions.

    format_ok: the think/answer pattern matched.
    think: reasoning text ("" if absent); answer: the raw answer text.
    action_names: the kept action strings (first `max_actions`, stripped, empties dropped).
    actions: the executable actions: ids for names found in the lookup (unknown names dropped),
      or the answer strings themselves when the env has no lookup.
    num_invalid: how many kept names were not in the lookup.
    problem: why a tool-call response is not a valid action ("" when it is, and in the answer format).
    """

    format_ok: bool
    think: str
    answer: str
    action_names: tuple[str, ...]
    actions: tuple[Any, ...]
    num_invalid: int
    problem: str = ""

    @property
    def turn_is_valid(self) -> bool:
        """RAGEN's rule: a turn is penalised when no action is valid or any action is invalid."""
        return bool(self.actions) and self.num_invalid == 0


def case_insensitive_lookup(lookup: dict[str, int] | None) -> dict[str, int] | None:
    """An env's action lookup keyed by lower-case names, as `parse_response` reads it. RAGEN matches action names
    case-insensitively however its env config spells them, so an env declaring {"Up": 0} must still take "up"."""
    if lookup is None:
        return None
    lowered: dict[str, int] = {}
    for name, action_id in lookup.items():
        key = str(name).lower()
        if lowered.setdefault(key, action_id) != action_id:
            raise ValueError(f"The action lookup names {key!r} twice with different ids ({lowered[key]} and "
                             f"{action_id}): action names are matched case-insensitively; rename one of them.")
    return lowered


def _match_think_answer(text: str) -> tuple[str, str] | None:
    """(think, answer) exactly as `THINK_ANSWER_PATTERN.search` would find them, in O(len).

    The first `<think>` is the start (a match from a later one is also a match from it); the
    lazy think group ends at the first `</think>` that `\s*<answer>` follows, and the lazy answer
    group at the first `</answer>` after that (none there means none later either).
    """
    start = text.find("<think>")
    if start < 0:
        return None
    think_start = start + len("<think>")
    close = _CLOSE_THINK_THEN_ANSWER.search(text, think_start)
    if close is None:
        return None
    answer_end = text.find("</answer>", close.end())
    if answer_end < 0:
        return None
    return text[think_start:close.start()], text[close.end():answer_end]


def _match_answer_only(text: str) -> str | None:
    start = text.find("<answer>")
    if start < 0:
        return None
    end = text.find("</answer>", start + len("<answer>"))
    return None if end < 0 else text[start + len("<answer>"):end]


def _strip_specials(text: str) -> str:
    for token in SPECIAL_TOKENS:
        text = text.replace(token, "")
    return text.strip()


def parse_response(
    response: str,
    *,
    action_lookup: dict[str, int] | None,
    max_actions: int,
    enable_think: bool = True,
    separator: str = ACTION_SEP,
) -> ParsedResponse:
    """Parse one full response text (including the leading `<think>` of the generation prefix)."""
    if enable_think:
        match = _match_think_answer(response)
        if match is None:
            return ParsedResponse(False, "", "", (), (), 0)
        think, answer = _strip_specials(match[0]), _strip_specials(match[1])
    else:
        answer_text = _match_answer_only(response)
        if answer_text is None:
            return ParsedResponse(False, "", "", (), (), 0)
        think, answer = "", _strip_specials(answer_text)
    names = tuple(a.strip() for a in answer.split(separator) if a.strip())[:max_actions]
    if action_lookup is None:
        return ParsedResponse(True, think, answer, names, names, 0)
    actions = []
    invalid = 0
    for name in names:
        action_id = action_lookup.get(name.lower())
        if action_id is None:
            invalid += 1
        else:
            actions.append(action_id)
    return ParsedResponse(True, think, answer, names, tuple(actions), invalid)


def recorded_response(response: str, *, enable_think: bool, max_actions: int, separator: str = ACTION_SEP) -> str:
    """A response as RAGEN records it for later prompts (its `llm_response`, which single_turn summaries show):
    the think and answer parts without special tokens or outer whitespace in bare tags, the answer cut to its first
    `max_actions` actions (joined by " || ") when it named more; a response off the format as it is."""
    parsed = parse_response(response, action_lookup=None, max_actions=max_actions, enable_think=enable_think,
                            separator=separator)
    if not parsed.format_ok:
        return response
    answer = parsed.answer
    if sum(1 for name in answer.split(separator) if name.strip()) > max_actions:
        answer = f" {separator} ".join(parsed.action_names)
    return f"<think>{parsed.think}</think><answer>{answer}</answer>" if enable_think else f"<answer>{answer}</answer>"


def parse_tool_response(response: str, *, tools: Sequence[Mapping[str, Any]], max_calls: int,
                        enable_think: bool = True) -> ParsedResponse:
    """Parse one full response in the tool-call action format (`rollout.action_format="tool_call"`): with thinking,
    `<think>...</think>` then `<tool_call>{"name": ..., "arguments": {...}}</tool_call>`; the first `max_calls`
    calls are the actions (envs.protocols.ToolEnv.call runs them). Never raises: a missing or unclosed block,
    malformed JSON, a tool not offered or arguments that do not fit its schema give no action, `num_invalid` 1 and
    the reason in `problem` (the turn is penalised as an invalid answer and the reason shown to the model)."""
    think, rest = "", response
    if enable_think:
        start, end = response.find("<think>"), response.find("</think>")
        if start < 0 or end < start:
            return _tool_problem(response, "the reply must close its reasoning with </think> before the tool call")
        think, rest = _strip_specials(response[start + len("<think>"):end]), response[end + len("</think>"):]
    schemas = {tool_name(t): t for t in tools}
    parsed = parse_tool_calls(rest, schemas)
    if parsed.problem:
        return _tool_problem(rest, parsed.problem, think)
    if not parsed.calls:
        offered = ", ".join(schemas) or "none"
        return _tool_problem(rest, f"no {OPEN}...{CLOSE} block: call one of the tools ({offered})", think)
    calls = parsed.calls[:max_calls]
    for call in calls:
        problem = argument_problem(schemas[call.name], call.arguments)
        if problem:
            return _tool_problem(rest, problem, think)
    names = tuple(call.name for call in calls)
    return ParsedResponse(True, think, _strip_specials(rest), names, tuple(calls), 0)


def _tool_problem(answer: str, problem: str, think: str = "") -> ParsedResponse:
    return ParsedResponse(False, think, _strip_specials(answer), (), (), 1, problem)
