"""Rollout outputs: per-episode records and the training-ready trajectory batch."""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from ragen_jax.rollout.prompts import TurnRecord


@dataclasses.dataclass
class Episode:
    """One played episode (host-side record, used for metrics, dumps and diagnostics)."""

    env_tag: str
    seed: int
    group_id: int
    history: list[TurnRecord]
    system: str
    prompt_style: str = "ragen"  # how turns are rendered (rollout.prompts.PROMPT_STYLES)
    prompt_max_tokens: int = 0  # the "Max response length" its prompts state (0: rollout.response_length)
    history_start: int = 0  # oldest turn kept in the final context (truncation)
    num_actions: int = 0
    penalty: float = 0.0
    terminated: bool = False
    truncated: bool = False
    success: bool = False
    error: str = ""
    valid_turns: int = 0
    effective_turns: int = 0
    info_sums: dict[str, float] = dataclasses.field(default_factory=dict)
    final_state: str | None = None  # the observation after the last turn (None after an env error)
    tools: tuple = ()  # the env's tool schemas in the tool-call action format (rollout.action_format), else ()

    @property
    def num_turns(self) -> int:
        return sum(r.response_tokens is not None for r in self.history)

    @property
    def env_reward(self) -> float:
        return float(sum(r.reward for r in self.history))

    @property
    def total_reward(self) -> float:
        """Episode score as RAGEN defines it: env rewards plus accumulated format penalties."""
        return self.env_reward + self.penalty


@dataclasses.dataclass
class TrajectoryBatch:
    """Training samples, right-padded to a bucketed length L (host numpy arrays).

    Token-aligned: logprobs[n, t] is log p(tokens[n, t] | tokens[n, :t]); loss_mask[n, t] = 1 on
    sampled assistant tokens that are trained. Rewards sit on a sample's last sampled token
    (or each turn's last sampled token with turn scores).
    tokens [N, L] int32; attention_mask [N, L] bool; loss_mask [N, L] f32;
    sample_logprobs [N, L] f32 (under the sampling distribution); raw_logprobs [N, L] f32
    (temperature 1); token_rewards [N, L] f32; turn_ids [N, L] int32 (-1 off responses);
    group_ids [N] int32; episode_ids [N] int32; scores [N] f32 (normalised episode scores);
    same_context [N, L] bool: True on response tokens whose row holds exactly the context they were sampled
    in (False where a "full" row dropped old turns that the token's sampling context still showed);
    token_versions [N, L] int32: the policy version that drew each response token (asynchronous training).
    images: a VL policy's rows, each row's pictures (`rollout.images.RowImages`, in order of their image tokens);
    None for text.
    """

    tokens: np.ndarray
    attention_mask: np.ndarray
    loss_mask: np.ndarray
    sample_logprobs: np.ndarray
    raw_logprobs: np.ndarray
    token_rewards: np.ndarray
    turn_ids: np.ndarray
    group_ids: np.ndarray
    episode_ids: np.ndarray
    scores: np.ndarray
    same_context: np.ndarray
    token_versions: np.ndarray
    images: list | None = None

    @property
    def num_samples(self) -> int:
        return int(self.tokens.shape[0])

    @property
    def length(self) -> int:
        return int(self.tokens.shape[1])

    def select(self, rows: np.ndarray) -> "TrajectoryBatch":
        """The samples at `rows` (a gather over the leading axis)."""
        picked = {f.name: getattr(self, f.name)[rows] for f in dataclasses.fields(self) if f.name != "images"}
        images = None if self.images is None else [self.images[int(r)] for r in np.arange(self.num_samples)[rows]]
        return TrajectoryBatch(**picked, images=images)

    def arrays(self) -> dict[str, np.ndarray]:
        """The token-aligned and per-row arrays (not the images)."""
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name != "images"}


@dataclasses.dataclass
class RolloutResult:
    episodes: list[Episode]
    batch: TrajectoryBatch
    metrics: dict[str, float]
    timing: dict[str, float]
    extras: dict[str, Any] = dataclasses.field(default_factory=dict)
