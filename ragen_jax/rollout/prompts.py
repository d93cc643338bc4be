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
) -> list[dict]:
    """Chat messages for the turns history[history_start:]; the last turn may lack a response.

    Assistant messages carry the record itself under "record" (besides "content") so the caller
    can splice in the exact sampled tokens.
    """
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
