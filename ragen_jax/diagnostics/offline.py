"""Offline collapse report for saved rollouts (the `python -m ragen_jax.diagnostics` CLI).

Reads the rollout dump (JSONL: one trajectory per line {"custom_id", "messages": [OpenAI chat
messages], "metadata": {group_id, ...}}; or a pickle of a list of such dicts), rebuilds each
turn's prompt with the checkpoint tokenizer's chat template (+ "<think>", as the rollout prompts
end), re-tokenizes the text between the think tags, and runs the same diagnostics as training.
Offline scoring re-tokenizes text because dumps keep text, not token ids (as RAGEN does).
"""

from __future__ import annotations

import functools
import json
import os
import pickle
import re
from typing import Any, Mapping, Sequence

import numpy as np

from ragen_jax.diagnostics.collapse import CollapseConfig, RolloutPairs, collapse_metrics
from ragen_jax.diagnostics.cross_score import cross_score

_THINK = re.compile(r"<think>(.*?)</think>", re.DOTALL)


def load_rollouts(path: str) -> list[dict[str, Any]]:
    """Trajectory records from a .jsonl file or a pickle (list of dicts, or {"trajectories": [...]})."""
    if not os.path.exists(path):
        raise FileNotFoundError(f"Rollout file {path!r} does not exist.")
    if path.endswith((".pkl", ".pickle")):
        with open(path, "rb") as f:
            data = pickle.load(f)
        if isinstance(data, Mapping):
            data = data.get("trajectories", data.get("rollouts"))
        if not isinstance(data, list):
            raise ValueError(
                f"{path!r} must pickle a list of trajectory dicts (or a dict with 'trajectories')."
            )
        records = data
    else:
        with open(path) as f:
            records = [json.loads(line) for line in f if line.strip()]
    for n, rec in enumerate(records):
        if not isinstance(rec, Mapping) or not isinstance(rec.get("messages"), list):
            raise ValueError(f"Record {n} of {path!r} has no 'messages' list (OpenAI chat messages).")
    return records


def think_text(content: str) -> str:
    """Text between <think> and </think>; a reply that starts inside the tag (the generation
    prompt already ended with <think>) counts up to </think>. Empty when there is none."""
    match = _THINK.search(content)
    if match:
        return match.group(1).strip()
    if "</think>" in content:
        return content.split("</think>", 1)[0].strip()
    return ""


def _turns(messages: Sequence[Mapping[str, str]]) -> list[tuple[list[dict], str]]:
    """(context before the assistant message, its content) for every assistant message."""
    return [
        ([dict(m) for m in messages[:i]], m["content"])
        for i, m in enumerate(messages)
        if m.get("role") == "assistant"
    ]


def rollout_pairs(records: Sequence[Mapping[str, Any]], tokenizer: Any, think_tag: str = "<think>") -> RolloutPairs:
    """Token-id prompts and reasonings of every turn; groups from metadata.group_id, else by prompt."""
    first_prompts, first_reasonings, group_ids = [], [], []
    turn_prompts, turn_reasonings = [], []
    by_prompt: dict[tuple[int, ...], int] = {}
    for rec in records:
        prompts, reasonings = [], []
        for context, content in _turns(rec["messages"]):
            text = tokenizer.apply_chat_template(context, add_generation_prompt=True) + think_tag
            prompts.append(tokenizer.encode(text))
            reasonings.append(tokenizer.encode(think_text(content)))
        if not prompts:
            continue
        turn_prompts.append(prompts)
        turn_reasonings.append(reasonings)
        first_prompts.append(prompts[0])
        first_reasonings.append(reasonings[0])
        gid = (rec.get("metadata") or {}).get("group_id")
        if gid is None:
            gid = by_prompt.setdefault(tuple(prompts[0]), len(by_prompt))
        group_ids.append(int(gid))
    if not first_prompts:
        raise ValueError("No trajectory has an assistant message; nothing to diagnose.")
    return RolloutPairs(first_prompts, first_reasonings, group_ids, turn_prompts, turn_reasonings)


def offline_report(
    rollouts: str,
    checkpoint: str,
    *,
    num_samples: int | None = 64,
    seed: int = 0,
    batch_size: int = 16,
    sampling: str = "both",
    thresholds: Mapping[str, Any] | None = None,
) -> dict[str, float]:
    """Collapse metrics of saved rollouts under the policy in an HF checkpoint folder."""
    from flax import nnx

    from ragen_jax.models import from_pretrained

    if sampling not in ("both", "first_turn", "trajectory"):
        raise ValueError(f"sampling={sampling!r} must be 'both', 'first_turn' or 'trajectory'.")
    records = load_rollouts(rollouts)
    model, tokenizer = from_pretrained(checkpoint)
    graphdef, params = nnx.split(model)
    pairs = rollout_pairs(records, tokenizer)
    score_fn = functools.partial(
        cross_score, graphdef, params, pad_id=tokenizer.pad_token_id, batch_size=batch_size
    )
    config = CollapseConfig(
        first_turn_enabled=sampling in ("both", "first_turn"),
        multi_turn_enabled=sampling in ("both", "trajectory"),
        num_samples=num_samples,
        thresholds=thresholds,
    )
    metrics, _ = collapse_metrics(pairs, score_fn, config, np.random.default_rng(seed))
    metrics["collapse/num_trajectories"] = float(len(pairs.group_ids))
    return metrics
