"""RAGEN's prompt texts: the system prompt and the per-turn user messages.

A conversation is built from per-turn records (`TurnRecord`) for one of three context modes:
- "full": every turn so far as chat messages (RAGEN's default);
- "limited_multi_turn": the last `window` turns as chat messages;
- "single_turn": one user message with the current state and a text summary of recent turns.
`history_start` drops the oldest turns (the window, and truncation past `max_model_len`).

Two prompt styles: "ragen" (the original's texts, the default) and "compact" (a departure for small
models: the system message only lists the actions, a turn shows only the state; see docs/quickstart.md).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from ragen_jax.rollout.parsing import ACTION_SEP

SYSTEM_PREFIX = "You're a helpful assistant. "
INVALID_WARNING = (
    "No valid action provided previously. Environment state remains the same. Please try again.\n"
)
LEGEND_HEADER = "\nThe meaning of each symbol in the state is:\n"
PROMPT_STYLES = ("ragen", "compact")


def check_style(style: str) -> str:
    """`style` itself if it names a prompt style; else a ValueError listing them."""
    if style not in PROMPT_STYLES:
        raise ValueError(f"Unknown prompt style {style!r}: use one of {PROMPT_STYLES}.")
    return style


@dataclasses.dataclass(eq=False)  # identity: records are looked up in their episode's history
class TurnRecord:
    """One turn of one episode: the state shown, then (once sampled) the response and reward."""

    state: str
    actions_left: int
    warn_invalid: bool = False  # the previous turn had no valid action
    response_text: str | None = None
    response_tokens: list[int] | None = None
    reward: float = 0.0  # env reward of the turn (sum over executed actions)
    actions_executed: int = 0  # how many of its actions the env ran
    invalid: bool = False  # this turn was penalised (no valid action or an invalid one)
    history_start: int = 0  # oldest turn shown in this turn's context
    context_tokens: Any = None  # the exact tokens the response was sampled after (np.int32 [L])
    recorded_text: str | None = None  # the response as single_turn summaries show it (RAGEN's llm_response)
    images: tuple = ()  # the state's pictures (RGB [H, W, 3] uint8), one per IMAGE_MARKER in `state`
    tool_error: str = ""  # tool-call format: why the response held no valid call (shown to the model next turn)


def system_prompt(
    instruction: str,
    legend: str,
    action_names: list[str] | None,
    max_actions_per_traj: int,
    separator: str = ACTION_SEP,
    style: str = "ragen",
) -> str:
    """RAGEN's system message: instruction, symbol legend, available actions and budget.

    "compact": only "Actions: a, b, c" (or nothing when the env has no fixed action names)."""
    if check_style(style) == "compact":
        return "Actions: " + ", ".join(action_names) if action_names else ""
    text = SYSTEM_PREFIX + instruction
    if legend:
        text += legend if legend.startswith("\n") else LEGEND_HEADER + legend
    if action_names:
        text += "\nYour available actions are:\n" + ", ".join(action_names)
        text += (
            f"\nYou can make up to {max_actions_per_traj} actions, separated by the action "
            f'separator " {separator} "\n'
        )
    return text


def format_reward(reward: float) -> str:
    """Rewards as Python prints short floats (10.9, -0.1), free of float32 noise."""
    value = round(float(reward), 4)
    return str(int(value)) + ".0" if value == int(value) else str(value)


def format_prompt(enable_think: bool) -> str:
    """RAGEN's FORMAT_PROMPT, verbatim."""
    if enable_think:
        return "<think> [Your thoughts] </think> <answer> [your answer] </answer>"
    return "<answer> [your answer] </answer>"


def turn_content(record: TurnRecord, turn_number: int, max_tokens: int, enable_think: bool,
                 label: str | None = None, style: str = "ragen") -> str:
    """The "Turn t:\\nState:..." block with the format instruction ("compact": the state alone)."""
    if style == "compact":
        return f"\n{record.state}\n"
    warning = INVALID_WARNING if record.warn_invalid else ""
    label = f"Turn {turn_number}" if label is None else label
    return (
        f"\n{label}:\nState:\n{record.state}\n{warning}"
        f"You have {record.actions_left} actions left. Always output: {format_prompt(enable_think)} "
        f"with no extra text. Strictly follow this format. "
        f"Max response length: {max_tokens} words (tokens).\n"
    )


def tool_format_prompt(enable_think: bool) -> str:
    """How a reply calls a tool, as the tool-call format's turns state it."""
    call = '<tool_call>{"name": ..., "arguments": {...}}</tool_call>'
    return f"<think> [Your thoughts] </think> {call}" if enable_think else call


def tool_turn_content(record: TurnRecord, max_tokens: int, enable_think: bool, style: str = "ragen") -> str:
    """The user message that opens a tool-call episode: the state, the calls left and the reply format."""
    if style == "compact":
        return f"\n{record.state}\n"
    return (f"\nState:\n{record.state}\nYou have {record.actions_left} tool calls left. Always output: "
            f"{tool_format_prompt(enable_think)} with no extra text, one tool call per reply. "
            f"Max response length: {max_tokens} words (tokens).\n")


def tool_reply_message(previous: TurnRecord, record: TurnRecord) -> dict:
    """What the model reads after its reply `previous` in the tool-call format: the tool's result in the template's
    tool role, or (no valid call, so no tool ran) a user message with the reason and the state unchanged."""
    if previous.tool_error:
        return {"role": "user", "content": f"Your reply held no valid tool call: {previous.tool_error}. Nothing ran; "
                                           f"you have {record.actions_left} tool calls left. Call one of the tools."}
    return {"role": "tool", "content": record.state}


def turn_score(record: TurnRecord, format_penalty: float) -> float:
    """The turn's env reward plus its format penalty: what `use_turn_scores` trains on that turn."""
    return record.reward + (format_penalty if record.invalid else 0.0)


def shown_reward(record: TurnRecord) -> str:
    """The reward the next prompt shows (RAGEN): the env's reward alone, the penalty being the trainer's; "0" after
    a turn in which no action ran (RAGEN prints its untouched integer 0)."""
    return format_reward(record.reward) if record.actions_executed or record.reward else "0"


def build_messages(
    system: str,
    history: list[TurnRecord],
    history_start: int,
    *,
    mode: str,
    max_tokens: int,
    enable_think: bool,
    format_penalty: float,
    style: str = "ragen",
    tools: tuple = (),
) -> list[dict]:
    """Chat messages for the turns history[history_start:]; the last turn may lack a response.

    Assistant messages carry the record itself under "record" (besides "content") so the caller
    can splice in the exact sampled tokens. With `tools` (the tool-call action format) the system message carries
    them under "tools" (the context builder renders them through the chat template) and each turn after the first
    opens with the tool's result (`tool_reply_message`).
    """
    if tools:
        return _tool_messages(system, history, history_start, mode, max_tokens, enable_think, style, tools)
    if mode == "single_turn":
        return _single_turn_messages(system, history, history_start, max_tokens, enable_think,
                                     format_penalty, style)
    if mode not in ("full", "limited_multi_turn"):
        raise ValueError(f"Unknown context mode {mode!r}: use full, limited_multi_turn or single_turn.")
    messages: list[dict] = [{"role": "system", "content": system}, {"role": "user", "content": ""}]
    for idx in range(history_start, len(history)):
        record = history[idx]
        messages[-1]["content"] += turn_content(record, idx + 1, max_tokens, enable_think, style=style)
        if record.response_text is None:
            break
        messages.append({"role": "assistant", "content": record.response_text, "record": record})
        if idx < len(history) - 1:
            messages.append({"role": "user", "content": f"Reward:\n{shown_reward(record)}\n"})
    return messages


def _single_turn_messages(system, history, history_start, max_tokens, enable_think,
                          format_penalty, style) -> list[dict]:
    """One user message: a summary of turns history_start..t-1 as text, then the current turn."""
    current = len(history) - 1
    content = ""
    if history_start < current:
        shown = current - history_start
        content += (
            f"Summary: {current} step(s) completed so far. Showing the last {shown} turn(s) with "
            f"state/action/reward details. Recent turns:\n---\n"
        )
        for idx in range(history_start, current):
            record = history[idx]
            content += f"Turn {idx + 1} State:\n{record.state}\n"
            shown = record.response_text if record.recorded_text is None else record.recorded_text
            content += f"Turn {idx + 1} Action: {shown}\n"
            content += f"Turn {idx + 1} Reward: {shown_reward(record)}\n---\n"
    prefix = "Current Turn " if history_start < current else ""
    block = turn_content(history[current], current + 1, max_tokens, enable_think,
                         label=f"{prefix}(Turn {current + 1})", style=style)
    content += block[1:] if not content else block
    messages = [{"role": "system", "content": system}, {"role": "user", "content": content}]
    record = history[current]
    if record.response_text is not None:
        messages.append({"role": "assistant", "content": record.response_text, "record": record})
    return messages


def _tool_messages(system, history, history_start, mode, max_tokens, enable_think, style, tools) -> list[dict]:
    """The tool-call format's conversation: system (with the tools), the first shown turn's state as a user message,
    then per turn the reply and what it got back (a tool result, or the reason no tool ran)."""
    if mode not in ("full", "limited_multi_turn"):
        raise ValueError(f"The tool-call action format needs context mode full or limited_multi_turn, got {mode!r}.")
    messages: list[dict] = [{"role": "system", "content": system, "tools": list(tools)},
                            {"role": "user", "content": tool_turn_content(history[history_start], max_tokens,
                                                                          enable_think, style)}]
    for idx in range(history_start, len(history)):
        record = history[idx]
        if idx > history_start:
            messages.append(tool_reply_message(history[idx - 1], record))
        if record.response_text is None:
            break
        messages.append({"role": "assistant", "content": record.response_text, "record": record})
    return messages
