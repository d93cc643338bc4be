"""Choosing the (prompt x, reasoning z) pairs the MI proxy cross-scores (RAGEN's two samplings).

First turn: rows are first-turn reasonings, columns the distinct first-turn prompts (one per
group when a group shares its prompt). Trajectory-uniform: pick a trajectory uniformly, then one
of its turns uniformly; every draw is its own column (identical prompts are merged later, for retrieval only). Empty
reasonings (no text between the think tags) are skipped. Token ids come from the rollout buffers.
"""

from __future__ import annotations

import dataclasses
from typing import Sequence

import numpy as np

Tokens = Sequence[int]


@dataclasses.dataclass(frozen=True)
class PairSample:
    """Rows (reasonings) and columns (prompts) of one cross-score matrix."""

    prompts: list[list[int]]  # [C] column prompts
    reasonings: list[list[int]]  # [R] row reasonings
    col_of_row: np.ndarray  # [R] each row's own column

    @property
    def col_keys(self) -> list[tuple[int, ...]]:
        """Per-column prompt signature: equal prompts are one answer for retrieval."""
        return [tuple(p) for p in self.prompts]

    @property
    def lengths(self) -> np.ndarray:
        """Reasoning token counts [R]."""
        return np.array([len(z) for z in self.reasonings], dtype=np.int64)


def first_turn_pairs(
    prompts: Sequence[Tokens],
    reasonings: Sequence[Tokens],
    group_ids: Sequence[int],
    rng: np.random.Generator,
    num_samples: int | None = 64,
) -> PairSample:
    """Up to num_samples first-turn pairs [N trajectories] drawn without replacement.

    Columns are the distinct first-turn prompts among the draws, in the order of the lowest group id
    showing each: one column per group when a group shares its prompt, one per episode where each
    draws its own (Bandit: seed + instance). RAGEN's columns are the distinct group ids (two groups
    showing one prompt are two columns there; a group whose prompts differ stops its metrics).
    """
    if not len(prompts) == len(reasonings) == len(group_ids):
        raise ValueError(
            f"first_turn_pairs needs one prompt, reasoning and group id per trajectory; got "
            f"{len(prompts)}, {len(reasonings)}, {len(group_ids)}."
        )
    valid = np.array([i for i, z in enumerate(reasonings) if len(z) > 0], dtype=np.int64)
    if num_samples is not None and num_samples < valid.size:
        valid = rng.choice(valid, size=num_samples, replace=False)
    column_of: dict[tuple[int, ...], int] = {}
    for i in valid[np.argsort(np.asarray(group_ids)[valid], kind="stable")]:
        column_of.setdefault(tuple(prompts[i]), len(column_of))
    return PairSample(
        prompts=[list(p) for p in column_of],
        reasonings=[list(reasonings[i]) for i in valid],
        col_of_row=np.array([column_of[tuple(prompts[i])] for i in valid], dtype=np.int64),
    )


def trajectory_uniform_pairs(
    turn_prompts: Sequence[Sequence[Tokens]],
    turn_reasonings: Sequence[Sequence[Tokens]],
    rng: np.random.Generator,
    num_samples: int | None = 64,
) -> PairSample:
    """min(num_samples, #turns) draws: trajectory uniform, then a turn with reasoning uniform.

    turn_prompts[m][t] is the full context before turn t's reasoning of trajectory m. A draw that
    lands on a trajectory without reasoning is dropped (as RAGEN does), so R can be smaller.
    """
    if len(turn_prompts) != len(turn_reasonings):
        raise ValueError("turn_prompts and turn_reasonings need one entry per trajectory.")
    valid_turns = [
        [t for t, z in enumerate(zs) if len(z) > 0] for zs in turn_reasonings
    ]
    total = sum(len(v) for v in valid_turns)
    draws = total if num_samples is None else min(num_samples, total)
    prompts, reasonings = [], []
    for _ in range(draws):
        m = int(rng.integers(len(valid_turns)))
        if not valid_turns[m]:
            continue
        t = valid_turns[m][int(rng.integers(len(valid_turns[m])))]
        prompts.append(list(turn_prompts[m][t]))
        reasonings.append(list(turn_reasonings[m][t]))
    return PairSample(prompts, reasonings, np.arange(len(reasonings), dtype=np.int64))
