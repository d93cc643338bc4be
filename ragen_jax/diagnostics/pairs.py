"""(prompt, reasoning) token pairs of played episodes, and the random draws of one diagnostics step.

Shared by the trainer (ragen_jax/trainer/collapse_monitor.py) and the offline CLI on a rollout PKL, so both
score the same pairs: prompts are the exact contexts the responses were sampled after, reasonings
the sampled tokens before "</think>"; nothing is re-tokenized.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable, Sequence

import numpy as np

from ragen_jax.diagnostics.collapse import RolloutPairs

if TYPE_CHECKING:
    from ragen_jax.rollout.types import Episode


def step_rng(step: int) -> np.random.Generator:
    """The generator that draws the pairs of training step `step` (the step TensorBoard shows)."""
    return np.random.default_rng([step, 7])


def _find(seq: Sequence[int], pattern: Sequence[int]) -> int:
    n = len(pattern)
    for i in range(len(seq) - n + 1):
        if list(seq[i:i + n]) == list(pattern):
            return i
    return -1


def _close_at(response: list[int], think_close: Sequence[int],
              decode: Callable[[list[int]], str] | None) -> int:
    """Index of the response token where "</think>" starts (-1 if it never closes).

    With `decode` the tag is found in the text: byte-level BPE merges the tag's first piece with what comes before
    it (cl100k-style vocabularies such as Qwen2.5's have " </" and ".</" tokens), so "I move up </think>" holds
    none of the tokens of a standalone "</think>". The cut is then before the token holding the tag's "<"; the text
    that token also holds (a space, a period) is left out of the reasoning. Without `decode`: the tag's tokens.
    """
    if decode is None:
        return _find(response, think_close)
    pos = decode(response).find(decode(list(think_close)))
    if pos < 0:
        return -1
    lo, hi = 0, len(response)  # the most tokens whose text ends at or before the tag (decoded length grows)
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if len(decode(response[:mid])) <= pos:
            lo = mid
        else:
            hi = mid - 1
    return lo


def reasoning_tokens(response: Sequence[int], think_close: Sequence[int],
                     decode: Callable[[list[int]], str] | None = None) -> list[int]:
    """The sampled tokens between the prompt's "<think>" and "</think>" ([] if never closed).

    With `decode` (token ids -> text), "</think>" is found in the text (see `_close_at`), and tokens that decode to
    whitespace only are dropped from both ends, as RAGEN strips the reasoning text: a reasoning of whitespace
    alone is empty (skipped, and not valid thinking).
    """
    response = list(map(int, response))
    end = _close_at(response, think_close, decode)
    tokens = response[:end] if end >= 0 else []
    if decode is not None:
        lo, hi = 0, len(tokens)
        while lo < hi and not decode([tokens[lo]]).strip():
            lo += 1
        while hi > lo and not decode([tokens[hi - 1]]).strip():
            hi -= 1
        tokens = tokens[lo:hi]
    return tokens


def rollout_pairs(episodes: Sequence["Episode"], think_close: Sequence[int],
                  decode: Callable[[list[int]], str] | None = None) -> RolloutPairs:
    """Token-level (prompt, reasoning) pairs per turn of every episode [N] whose env did not fail (a failed episode
    never trains; they are counted in num_failed); `decode`: see reasoning_tokens."""
    played = [ep for ep in episodes if not getattr(ep, "error", "")]
    turn_prompts, turn_reasonings = [], []
    for ep in played:
        done = [r for r in ep.history if r.response_tokens is not None and r.context_tokens is not None]
        turn_prompts.append([list(map(int, r.context_tokens)) for r in done])
        turn_reasonings.append([reasoning_tokens(r.response_tokens, think_close, decode) for r in done])
    return RolloutPairs(
        first_turn_prompts=[p[0] if p else [] for p in turn_prompts],
        first_turn_reasonings=[z[0] if z else [] for z in turn_reasonings],
        group_ids=[ep.group_id for ep in played],
        turn_prompts=turn_prompts, turn_reasonings=turn_reasonings, num_failed=len(episodes) - len(played))
