"""Rollout dumps as RAGEN writes them: JSONL of OpenAI chat messages, or a PKL of everything."""

from __future__ import annotations

import json
import os
import pickle
from typing import Any, Mapping

from ragen_jax.rollout.prompts import build_messages
from ragen_jax.rollout.types import Episode, RolloutResult


def dump_kwargs(rollout: Any) -> dict[str, Any]:
    """The prompt settings a dump renders conversations with (a RolloutConfig's)."""
    return dict(max_tokens=rollout.response_length, enable_think=rollout.enable_think,
                format_penalty=rollout.format_penalty)


def episode_messages(ep: Episode, *, max_tokens: int, enable_think: bool, format_penalty: float) -> list[dict]:
    """The whole conversation (all turns, no truncation) as plain chat messages."""
    messages = build_messages(ep.system, ep.history, 0, mode="full", max_tokens=ep.prompt_max_tokens or max_tokens,
                              enable_think=enable_think, format_penalty=format_penalty, style=ep.prompt_style)
    return [{"role": m["role"], "content": m["content"]} for m in messages]


def episode_record(ep: Episode, index: int, **prompt_kwargs: Any) -> dict:
    """One JSONL line: {"custom_id", "messages", "metadata"}."""
    return {
        "custom_id": f"traj_{index}",
        "messages": episode_messages(ep, **prompt_kwargs),
        "metadata": {
            "env_id": index,
            "env_tag": ep.env_tag,
            "seed": ep.seed,
            "group_id": ep.group_id,
            "num_turns": ep.num_turns,
            "num_actions": ep.num_actions,
            "total_reward": ep.total_reward,
            "env_reward": ep.env_reward,
            "penalty": ep.penalty,
            "success": ep.success,
            "terminated": ep.terminated,
            "truncated": ep.truncated,
            "error": ep.error,
            "final_state": ep.final_state,
            "response_tokens": [r.response_tokens for r in ep.history if r.response_tokens is not None],
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
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        for i, ep in enumerate(episodes):
            f.write(json.dumps(episode_record(ep, i, **prompt_kwargs), ensure_ascii=False) + "\n")
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
