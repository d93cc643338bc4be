"""Demonstrations as a JSONL file of OpenAI chat messages: written from played episodes, read into rows.

Each line is one training row {"messages": [{"role", "content", "weight"?}, ...], "metadata":
{"response_tokens": ...}?} (what `rollout.dump.write_jsonl` and `write_demo_jsonl` write, or the user's own);
the loss covers the assistant messages whose "weight" is not 0 (OpenAI's fine-tuning format).
"""

from __future__ import annotations

import json
from typing import Any, Sequence

import numpy as np

from ragen_jax.rollout.config import RolloutConfig
from ragen_jax.rollout.context import ContextBuilder
from ragen_jax.rollout.dump import recorded_response_tokens
from ragen_jax.rollout.episodes import strip_end_of_turn
from ragen_jax.rollout.prompts import build_messages
from ragen_jax.rollout.types import Episode
from ragen_jax.warmstart.demos import DemoRows, _response_tokens, check_response_length, response_text


def row_conversations(ep: Episode, cfg: RolloutConfig) -> list[dict]:
    """One JSONL record per training row of `ep` in cfg's context mode (assistant `weight` 0/1)."""
    responded = [i for i, r in enumerate(ep.history) if r.response_tokens is not None]
    turns = responded[-1:] if cfg.context_mode == "full" else responded
    records = []
    for t in turns:
        start = ep.history_start if cfg.context_mode == "full" else ep.history[t].history_start
        messages = build_messages(ep.system, ep.history[: t + 1], start, mode=cfg.context_mode,
                                  max_tokens=ep.prompt_max_tokens or cfg.response_length, enable_think=cfg.enable_think,
                                  format_penalty=cfg.format_penalty, style=ep.prompt_style, tools=ep.tools)
        out, tokens = [], []
        for m in messages:
            item = {"role": m["role"], "content": m["content"]}
            if m["role"] == "assistant":
                trained = cfg.context_mode == "full" or m["record"] is ep.history[t]
                item["weight"] = int(trained)
                tokens.append(list(m["record"].response_tokens))
            out.append(item)
        tools = {"tools": list(ep.tools)} if ep.tools else {}
        records.append({"messages": out, **tools, "metadata": {"env_tag": ep.env_tag, "seed": ep.seed, "turn": t,
                                                               "response_tokens": tokens}})
    return records


def write_demo_jsonl(path: str, episodes: list[Episode], cfg: RolloutConfig) -> str:
    """Write episodes as JSONL training rows (OpenAI chat format) in cfg's context mode."""
    with open(path, "w", encoding="utf-8") as f:
        for ep in episodes:
            for record in row_conversations(ep, cfg):
                f.write(json.dumps(record, ensure_ascii=False) + "\n")
    return path


# ------------------------------------------------------------------------------ JSONL -> rows
def _assistant_tokens(tokenizer, builder: ContextBuilder, content: str, given: list[int] | None,
                      cfg: RolloutConfig, where: str) -> list[int]:
    """The exact tokens of an assistant message: recorded ones if they decode to it, else encoded."""
    prefix = builder.generation_suffix
    if given is not None and strip_end_of_turn(prefix + tokenizer.decode(given), builder.eos_texts) == content:
        return [int(t) for t in given]
    if not content.startswith(prefix):
        raise ValueError(f"{where}: an assistant message must start with the generation prefix {prefix!r} "
                         f"(rollout.enable_think={cfg.enable_think}), e.g. "
                         f"{prefix + response_text(['Up'], enable_think=cfg.enable_think)!r}.")
    return _response_tokens(builder, content[len(prefix):], cfg)


ROLES = ("system", "user", "assistant", "tool")


def _record_tools(record: Any, cfg: RolloutConfig, where: str) -> list | None:
    """A record's "tools" (the JSON schemas a tool-call conversation's template lists), checked against the format."""
    tools = record.get("tools") if isinstance(record, dict) else None
    if cfg.action_format != "tool_call":
        if tools:
            raise ValueError(f"{where}: the record lists \"tools\" but rollout.action_format='answer'; set "
                             "rollout.action_format='tool_call' (RL then lists the env's tools too) or drop them.")
        return None
    if not (isinstance(tools, list) and tools and all(
            isinstance(t, dict) and isinstance(t.get("function", t).get("name"), str) for t in tools)):
        raise ValueError(f"{where}: rollout.action_format='tool_call' needs \"tools\": [{{\"type\": \"function\", "
                         "\"function\": {\"name\": ..., \"parameters\": {...}}}, ...] in each record (the env's "
                         "schemas, as RL's prompts list them).")
    return tools


def _check_message(m: Any, where: str, index: int) -> None:
    """One message of a demonstration, or ValueError naming the line, the message and the fix."""
    which = f" (message {index + 1})"
    if not isinstance(m, dict) or m.get("role") not in ROLES or not isinstance(m.get("content"), str):
        raise ValueError(f"{where}: each message needs a role ({'|'.join(ROLES)}) and a string content; got "
                         f"{m!r:.200}{which}.")
    if "weight" in m and m["role"] != "assistant":
        raise ValueError(f"{where}: only assistant messages take a weight (the others are never trained); drop it"
                         f"{which}.")
    if m.get("weight", 1) not in (0, 1):  # "0" or 0.5 would train silently
        raise ValueError(f"{where}: a message's weight is 0 (not trained) or 1 (trained); got {m['weight']!r}{which}.")
    if m.get("tool_calls"):
        raise ValueError(f"{where}: write a tool call in the assistant content as the model writes it "
                         "('<tool_call>{\"name\": ..., \"arguments\": {...}}</tool_call>'), not as \"tool_calls\": "
                         f"demonstrations train the exact tokens of the content{which}.")


def rows_from_conversations(records: Sequence[dict], tokenizer, cfg: RolloutConfig, *,
                            source: str = "demos", line_numbers: Sequence[int] | None = None) -> DemoRows:
    """One row per record {"messages": [...], "tools": [...]?, "metadata": {"response_tokens": ...}?}; loss on
    assistant messages whose "weight" is not 0 (OpenAI fine-tuning format; docs/running.md, Demonstrations).
    line_numbers: each record's line in `source`, for errors (default 1, 2, ...)."""
    builder = ContextBuilder(tokenizer, enable_think=cfg.enable_think, action_format=cfg.action_format)
    rows = []
    for i, record in enumerate(records):
        where = f"{source} line {line_numbers[i] if line_numbers is not None else i + 1}"
        messages = record.get("messages") if isinstance(record, dict) else record
        if not isinstance(messages, list) or not messages:
            raise ValueError(f"{where}: expected {{\"messages\": [{{\"role\": ..., \"content\": ...}}, ...]}}.")
        tools = _record_tools(record, cfg, where)
        given = recorded_response_tokens(
            record, sum(isinstance(m, dict) and m.get("role") == "assistant" for m in messages))
        chat, trained, k = [], [], 0
        for index, m in enumerate(messages):
            _check_message(m, where, index)
            item = {"role": m["role"], "content": m["content"]}
            if m["role"] == "assistant":
                item["tokens"] = _assistant_tokens(tokenizer, builder, m["content"],
                                                   given[k] if given else None, cfg, where)
                if m.get("weight", 1):
                    trained.append(k)
                    check_response_length(len(item["tokens"]), cfg, f"{where}: assistant message {k + 1}", "it")
                k += 1
            chat.append(item)
        if tools:
            chat[0]["tools"] = tools
        if not trained:
            raise ValueError(f"{where}: no assistant message to train on (all weights are 0 or none exist).")
        tokens, turn_map = builder.assemble(chat, add_generation_prompt=False)
        if len(tokens) > cfg.max_model_len:  # RL never shows a context this long: it drops the oldest turns
            raise ValueError(f"{where}: the conversation is {len(tokens)} tokens, more than rollout.max_model_len="
                             f"{cfg.max_model_len} (RL drops the oldest turns of a longer context, so it never "
                             f"sees such a row). Split it into rows of fewer turns or raise rollout.max_model_len.")
        rows.append((tokens, np.isin(turn_map, trained)))
    if not rows:
        raise ValueError(f"{source}: no demonstrations found.")
    width = max(len(t) for t, _ in rows)
    out = DemoRows(np.full((len(rows), width), tokenizer.pad_token_id, np.int32),
                   np.zeros((len(rows), width), bool), np.zeros((len(rows), width), np.float32))
    for i, (tokens, mask) in enumerate(rows):
        out.tokens[i, :len(tokens)] = tokens
        out.attention_mask[i, :len(tokens)] = True
        out.loss_mask[i, :len(tokens)] = mask
    return out


def load_jsonl_demos(path: str, tokenizer, cfg: RolloutConfig) -> DemoRows:
    """Rows from a JSONL file of chat conversations (see `rows_from_conversations`)."""
    records, lines = [], []
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            if line.strip():
                try:
                    records.append(json.loads(line))
                except (json.JSONDecodeError, RecursionError) as e:
                    raise ValueError(f"{path} line {n} is not JSON ({e}); each line is one JSON object "
                                     "(docs/running.md, Demonstrations).") from None
                lines.append(n)
    return rows_from_conversations(records, tokenizer, cfg, source=path, line_numbers=lines)
