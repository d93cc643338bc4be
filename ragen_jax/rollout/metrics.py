"""Rollout metrics under RAGEN's names: `{tag}/success`, `{tag}/num_actions`, ...; RAGEN's `{tag}/pass@{k}` is
`{tag}/pass_at_{k}` (a name TensorBoard keeps as it is)."""

from __future__ import annotations

from collections import Counter, defaultdict
from numbers import Number
from typing import Any

import numpy as np

from ragen_jax.rollout.types import Episode


def accumulate_info(sums: dict[str, float], info: dict[str, Any]) -> None:
    """Add an env step's numeric/bool info values into per-episode sums (averaged per turn later)."""
    for k, v in info.items():
        if isinstance(v, (bool, np.bool_, Number, np.number)) and k not in ("success",):
            sums[k] = sums.get(k, 0.0) + float(v)


def episode_metrics(episodes: list[Episode], tag: str) -> dict[str, float]:
    """Per-env-tag metrics over a batch of episodes (groups share `group_id`).

    An episode whose env failed counts only in `{tag}/env_error`: the others describe the policy on the
    episodes that ran (a crashed env is not a policy failure), over healthy episodes alone; `pass_at_k`
    is over groups with a healthy member. With none healthy they are 0.
    """
    group_size = max(Counter(ep.group_id for ep in episodes).values())
    healthy = [ep for ep in episodes if not ep.error]
    out = _policy_metrics(healthy, tag, group_size)
    out[f"{tag}/env_error"] = float(np.mean([bool(ep.error) for ep in episodes]))
    return out


CONTEXT_MODES = ("full", "limited_multi_turn", "single_turn")


def response_length(episodes: list[Episode], mode: str = "full") -> float:
    """RAGEN's `response_length`: sampled response tokens per training sample (its response mask summed per row,
    averaged over rows). A "full" sample is an episode's conversation from its final context's oldest turn
    (`history_start`) on; the per-turn modes train one turn per sample. 0 when none was sampled (every episode
    ended at its reset), as the other metrics over nothing, so one failed batch logs no NaN into an average."""
    if mode not in CONTEXT_MODES:
        raise ValueError(f"Unknown context mode {mode!r}; rollout.context_mode is one of {CONTEXT_MODES}.")
    if mode != "full":
        return response_length_per_turn(episodes)
    return _mean([sum(len(r.response_tokens) for r in ep.history[ep.history_start:] if r.response_tokens is not None)
                  for ep in episodes if ep.num_turns])


def response_length_per_turn(episodes: list[Episode]) -> float:
    """Mean tokens per sampled response over every episode's turns; 0 when none was sampled."""
    return _mean([len(r.response_tokens) for ep in episodes for r in ep.history if r.response_tokens is not None])


def _mean(values) -> float:
    """The mean, 0 over nothing (no healthy episode)."""
    return float(np.mean(values)) if len(values) else 0.0


def episode_values(ep: Episode) -> dict[str, float]:
    """One episode's values of the per-tag metrics (their means over episodes are `_policy_metrics`): success,
    actions, turns, the per-turn shares of valid and effective turns, rewards, and each numeric env info per turn
    (an info key that names one of the others is left out)."""
    turns = max(ep.num_turns, 1)
    values = {"success": float(ep.success), "num_actions": float(ep.num_actions), "num_turns": float(ep.num_turns),
              "action_is_valid": ep.valid_turns / turns, "action_is_effective": ep.effective_turns / turns,
              "reward": ep.total_reward, "env_reward": ep.env_reward, "format_penalty": ep.penalty}
    for k in sorted(ep.info_sums):
        values.setdefault(k, ep.info_sums[k] / turns)
    return values


_POLICY_KEYS = ("success", "num_actions", "num_turns", "action_is_valid", "action_is_effective", "reward",
                "env_reward", "format_penalty")


def _policy_metrics(episodes: list[Episode], tag: str, group_size: int) -> dict[str, float]:
    by_group: dict[int, list[Episode]] = defaultdict(list)
    for ep in episodes:
        by_group[ep.group_id].append(ep)
    turns = np.array([max(ep.num_turns, 1) for ep in episodes], np.float64)
    per_episode = [episode_values(ep) for ep in episodes]
    out = {f"{tag}/{k}": _mean([values[k] for values in per_episode]) for k in _POLICY_KEYS}
    out[f"{tag}/pass_at_{group_size}"] = _mean([any(e.success for e in g) for g in by_group.values()])
    keys = {k for ep in episodes for k in ep.info_sums} - {"action_is_valid", "action_is_effective"}
    for k in sorted(keys):
        out[f"{tag}/{k}"] = _mean([ep.info_sums.get(k, 0.0) / t for ep, t in zip(episodes, turns)])
    return out
