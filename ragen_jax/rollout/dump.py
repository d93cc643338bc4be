"""Rollout dumps: JSONL of OpenAI chat messages, or a PKL of everything.

A JSONL line is RAGEN's trajectory record (scripts/convert_to_jsonl.py) {"custom_id": "traj_i", "messages": [...],
"metadata": {...}}. `write_jsonl` (the trainer's dumps) writes the whole conversation the policy saw as its messages
(system prompt, each turn's prompt, each response) and metadata holding RAGEN's keys (env_id, group_id, num_turns,
total_reward, success, the episode's `{tag}/...` metrics with `{tag}/pass@{k}`, n_tokens) and ours. `write_ragen_jsonl`
writes RAGEN's converter output exactly: bare states and raw responses as messages, RAGEN's metadata keys only.
Both load with a plain JSON reader and with `datasets.load_dataset("json", data_files=...)`.
"""

from __future__ import annotations

import json
import math
import os
import pickle
from collections import defaultdict
from typing import Any, Mapping

from ragen_jax.rollout.metrics import episode_values
from ragen_jax.rollout.prompts import build_messages, shown_reward
from ragen_jax.rollout.types import Episode, RolloutResult


def dump_kwargs(rollout: Any) -> dict[str, Any]:
    """The prompt settings a dump renders conversations with (a RolloutConfig's)."""
    return dict(max_tokens=rollout.response_length, enable_think=rollout.enable_think,
                format_penalty=rollout.format_penalty)


def episode_messages(ep: Episode, *, max_tokens: int, enable_think: bool, format_penalty: float) -> list[dict]:
    """The whole conversation (all turns, no truncation) as plain chat messages."""
    messages = build_messages(ep.system, ep.history, 0, mode="full", max_tokens=ep.prompt_max_tokens or max_tokens,
                              enable_think=enable_think, format_penalty=format_penalty, style=ep.prompt_style,
                              tools=ep.tools)
    return [{"role": m["role"], "content": m["content"]} for m in messages]


def ragen_messages(ep: Episode) -> list[dict]:
    """RAGEN's converter messages: each state as a user message and each raw response as an assistant message, the
    final state last. A state after the first carries " (reward: r)" when the turn played from it earned r != 0
    (RAGEN attaches a turn's reward to the state it was played from)."""
    messages = []
    for i, record in enumerate(ep.history):
        suffix = f" (reward: {shown_reward(record)})" if i > 0 and record.reward != 0 else ""
        messages.append({"role": "user", "content": record.state + suffix})
        if record.response_text is None:
            return messages
        if record.response_text:
            messages.append({"role": "assistant", "content": record.response_text})
    if ep.final_state is not None:
        messages.append({"role": "user", "content": ep.final_state})
    return messages


def group_outcomes(episodes: list[Episode]) -> list[tuple[int, bool]]:
    """Per episode: (size of its group, whether any episode of the group succeeded), a group being the episodes of
    one env tag and group id in this dump (RAGEN's pass@k)."""
    groups: dict[tuple[str, int], list[Episode]] = defaultdict(list)
    for ep in episodes:
        groups[(ep.env_tag, ep.group_id)].append(ep)
    return [(len(groups[(ep.env_tag, ep.group_id)]), any(e.success for e in groups[(ep.env_tag, ep.group_id)]))
            for ep in episodes]


def ragen_metadata(ep: Episode, index: int, group: tuple[int, bool] | None = None) -> dict:
    """RAGEN's metadata of trajectory `index`: env_id, group_id, num_turns, total_reward, success, the episode's
    metrics under `{tag}/...` (RAGEN's es_manager names, `{tag}/pass@{k}` over `group` = (k, any success)), and
    n_tokens. RAGEN's converter looks `success` up among tag-prefixed keys and so always writes False; here it is
    the episode's success. A non-finite reward or metric is written as null (JSON has no NaN)."""
    size, passed = group if group is not None else (1, ep.success)
    metrics = {f"{ep.env_tag}/{k}": _finite(v) for k, v in episode_values(ep).items()}
    metrics[f"{ep.env_tag}/pass@{size}"] = float(passed)
    return {"env_id": index, "group_id": ep.group_id, "num_turns": ep.num_turns, "total_reward": _finite(ep.total_reward),
            "success": bool(ep.success), **metrics,
            "n_tokens": sum(len(r.response_tokens) for r in ep.history if r.response_tokens is not None)}


def _finite(value: float) -> float | None:
    return float(value) if math.isfinite(value) else None


def episode_record(ep: Episode, index: int, group: tuple[int, bool] | None = None, **prompt_kwargs: Any) -> dict:
    """One JSONL line of `write_jsonl`: {"custom_id", "messages" (the whole conversation), "metadata" (RAGEN's keys,
    then ours)}; `group` as in `ragen_metadata`. A tool-call episode also carries "tools" (the schemas its template
    listed, as OpenAI's fine-tuning files do) and metadata.tool_errors (per turn, why no valid call was read)."""
    tools = {"tools": list(ep.tools)} if ep.tools else {}
    tool_errors = {"tool_errors": [r.tool_error for r in ep.history if r.response_tokens is not None]} if tools else {}
    return {
        "custom_id": f"traj_{index}",
        "messages": episode_messages(ep, **prompt_kwargs),
        **tools,
        "metadata": {
            **ragen_metadata(ep, index, group),
            "env_tag": ep.env_tag,
            "seed": ep.seed,
            "num_actions": ep.num_actions,
            "env_reward": _finite(ep.env_reward),
            "penalty": ep.penalty,
            "terminated": ep.terminated,
            "truncated": ep.truncated,
            "error": ep.error,
            "final_state": ep.final_state,
            "response_tokens": [r.response_tokens for r in ep.history if r.response_tokens is not None],
            **tool_errors,
        },
    }


def recorded_response_tokens(record: Any, count: int) -> list | None:
    """A record's metadata.response_tokens when it is a list of `count` token-id lists, one per assistant message
    (else None: contents are encoded)."""
    metadata = record.get("metadata") if isinstance(record, Mapping) else None
    given = metadata.get("response_tokens") if isinstance(metadata, Mapping) else None
    if (isinstance(given, list) and len(given) == count
            and all(isinstance(t, list) and all(type(i) is int for i in t) for t in given)):
        return given
    return None


def ragen_record(ep: Episode, index: int, group: tuple[int, bool] | None = None) -> dict:
    """One line of RAGEN's converter output: {"custom_id", "messages": `ragen_messages`, "metadata": `ragen_metadata`}."""
    return {"custom_id": f"traj_{index}", "messages": ragen_messages(ep), "metadata": ragen_metadata(ep, index, group)}


def episode_header(ep: Episode, index: int, count: int) -> str:
    """One line saying which episode a shown conversation is and how it went."""
    outcome = "success" if ep.success else "no success"
    ending = "failed: " + ep.error if ep.error else (
        "terminated" if ep.terminated else "truncated" if ep.truncated else "ran out of turns")
    return (f"Episode {index} of {count} ({ep.env_tag}, seed {ep.seed}, group {ep.group_id}): reward "
            f"{ep.total_reward:.3g} (env {ep.env_reward:.3g}, penalty {ep.penalty:.3g}), {outcome}, "
            f"{ep.num_turns} turns, {ep.num_actions} actions, {ending}")


def sample_episodes(episodes: list[Episode]) -> list[int]:
    """Which episodes to show as a rollout's sample: the first that succeeded and the first that did not (one of
    them when every episode went the same way)."""
    first = {}
    for i, ep in enumerate(episodes):
        first.setdefault(bool(ep.success), i)
    return sorted(first.values())


def trajectory_sample_text(episodes: list[Episode], **prompt_kwargs: Any) -> str:
    """Markdown for TensorBoard's text tab: each of `sample_episodes` with its header, its messages and the state
    its last turn left (RAGEN's dump ends on it too)."""
    parts = []
    for i in sample_episodes(episodes):
        messages = episode_messages(episodes[i], **prompt_kwargs)
        shown = [(m["role"], m["content"]) for m in messages]
        if episodes[i].final_state is not None:
            shown.append(("final state", episodes[i].final_state))
        body = "\n\n".join(f"**{role}**:\n```\n{content}\n```" for role, content in shown)
        parts.append(f"### {episode_header(episodes[i], i, len(episodes))}\n\n{body}")
    return "\n\n---\n\n".join(parts)


def write_jsonl(path: str, episodes: list[Episode], **prompt_kwargs: Any) -> str:
    """One `episode_record` line per episode (the trainer's train/val/eval dumps); returns `path`."""
    groups = group_outcomes(episodes)
    return _write_lines(path, (episode_record(ep, i, groups[i], **prompt_kwargs) for i, ep in enumerate(episodes)))


def write_ragen_jsonl(path: str, episodes: list[Episode]) -> str:
    """RAGEN's scripts/convert_to_jsonl.py output for `episodes`: one `ragen_record` line each; returns `path`."""
    groups = group_outcomes(episodes)
    return _write_lines(path, (ragen_record(ep, i, groups[i]) for i, ep in enumerate(episodes)))


def _write_lines(path: str, records) -> str:
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        for record in records:
            f.write(json.dumps(record, ensure_ascii=False) + "\n")
    return path


def read_jsonl(path: str) -> list[Any]:
    """One JSON value per non-blank line of a UTF-8 file; a bad line is named by its number."""
    records = []
    try:
        with open(path, encoding="utf-8") as f:
            for number, line in enumerate(f, 1):
                if line.strip():
                    try:
                        records.append(json.loads(line))
                    except json.JSONDecodeError as e:
                        raise ValueError(f"Line {number} of {path!r} is not JSON ({e}); a JSONL dump holds one "
                                         "trajectory object per line.") from e
    except UnicodeDecodeError as e:
        raise ValueError(f"{path!r} is not UTF-8 text ({e}); pass a .jsonl dump, or a pickle named .pkl.") from e
    return records


def write_pkl(path: str, result: RolloutResult) -> str:
    """The full rollout: episodes (exact tokens), the training batch arrays (None for an evaluation), metrics."""
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "wb") as f:
        pickle.dump({"episodes": result.episodes, "batch": result.batch.arrays() if result.batch is not None else None,
                     "metrics": result.metrics}, f)
    return path
