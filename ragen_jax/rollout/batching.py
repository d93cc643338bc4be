"""Turn played episodes into a training batch: one sample per episode ("full") or per turn."""

from __future__ import annotations

import dataclasses

import numpy as np

from ragen_jax.rollout.context import ContextBuilder
from ragen_jax.rollout.images import ImagePrompts, RowImages, empty_row_images, shown_images
from ragen_jax.rollout.prompts import build_messages, turn_score
from ragen_jax.rollout.rewards import normalize_scores
from ragen_jax.rollout.types import Episode, TrajectoryBatch
from ragen_jax.shapes import ROW_BUCKETS, bucket_length


@dataclasses.dataclass
class _Sample:
    tokens: np.ndarray
    turn_map: np.ndarray  # index into `turn_indices` per token, -1 off responses
    turn_indices: list[int]  # history index of each assistant message in the sample
    trained: set[int]  # history indices whose responses are trained in this sample
    episode: int
    reward_turn: int | None  # history index carrying the episode score (None: turn scores)
    start: int  # the oldest history turn in the sample's context
    images: RowImages | None = None  # the context's pictures (a VL policy's rows)


def _episode_samples(builder: ContextBuilder, ep: Episode, ep_idx: int, *, mode: str, window: int,
                     max_tokens: int, enable_think: bool, format_penalty: float,
                     use_turn_scores: bool, history_starts: list[int],
                     image_prompts: ImagePrompts | None = None) -> list[_Sample]:
    responded = [i for i, r in enumerate(ep.history) if r.response_tokens is not None]
    if not responded:
        return []
    samples = []
    turns_to_sample = [responded[-1]] if mode == "full" else responded
    for t in turns_to_sample:
        start = ep.history_start if mode == "full" else history_starts[t]
        messages = build_messages(ep.system, ep.history[: t + 1], start, mode=mode,
                                  max_tokens=ep.prompt_max_tokens or max_tokens, enable_think=enable_think,
                                  format_penalty=format_penalty, style=ep.prompt_style, tools=ep.tools)
        for m in messages:
            if m["role"] == "assistant":
                m["tokens"] = m["record"].response_tokens
        images = None
        if image_prompts is None:
            tokens, turn_map = builder.assemble(messages, add_generation_prompt=False)
        else:
            tokens, turn_map, images = image_prompts.assemble(builder, messages, shown_images(ep.history, start, t),
                                                              add_generation_prompt=False)
        turn_indices = [ep.history.index(m["record"]) for m in messages if m["role"] == "assistant"]
        trained = set(turn_indices) if mode == "full" else {t}
        samples.append(_Sample(tokens, turn_map, turn_indices, trained, ep_idx,
                               None if use_turn_scores else t, start, images))
    return samples


def sampled_in_row_context(row_tokens: np.ndarray, first: int, record, row_start: int) -> bool:
    """Whether a row shows a response after exactly the tokens it was sampled after: row_tokens [L] of the row,
    `first` its first response position. A `full` row past max_model_len drops the turns truncation dropped last,
    so earlier turns were sampled seeing more; a template whose text changed between turns (a date line past
    midnight) changes the context too. Without the recorded context (older dumps), the truncation test alone."""
    context = record.context_tokens
    if context is None:
        return record.history_start == row_start
    return len(context) == first and bool(np.array_equal(row_tokens[:first], context))


def build_batch(builder: ContextBuilder, episodes: list[Episode], *, mode: str, window: int,
                max_tokens: int, enable_think: bool, format_penalty: float, use_turn_scores: bool,
                norm_method: str, norm_grouping: str, logprobs: dict, pad_id: int,
                row_multiple: int = 1, versions: dict | None = None,
                image_prompts: ImagePrompts | None = None) -> TrajectoryBatch:
    """Assemble samples from the episodes' exact sampled tokens.

    logprobs: {(episode, turn): (sample_logprobs [n], raw_logprobs [n])} per response; versions: {(episode, turn):
    [n]} the policy version of each sampled token (asynchronous training; none: version 0).
    Rows are padded (all-zero masks) up to a multiple of `row_multiple`. `same_context` marks the response
    tokens sampled in exactly their row's context: the trainer replaces the others' sampler log-probs by its own.
    An episode whose env failed keeps its rows (dumps, diagnostics) with an all-zero loss mask, reward and score:
    it never trains. Turn scores train only in the "full" mode (RolloutConfig refuses them elsewhere).
    With image_prompts (a VL policy), the rows' contexts show their turns' pictures as image tokens (never in a
    loss mask) and the batch keeps each row's images (`TrajectoryBatch.images`).
    """
    raw_scores = np.array([ep.total_reward for ep in episodes], np.float32)
    group_ids = np.array([ep.group_id for ep in episodes])
    tags = np.array([ep.env_tag for ep in episodes])
    ok = np.array([not ep.error for ep in episodes], bool)  # a failed episode never trains
    scores = normalize_scores(raw_scores, group_ids, tags, method=norm_method, grouping=norm_grouping, valid=ok)
    samples: list[_Sample] = []
    for idx, ep in enumerate(episodes):
        starts = [r.history_start for r in ep.history]
        samples.extend(_episode_samples(builder, ep, idx, mode=mode, window=window,
                                        max_tokens=max_tokens, enable_think=enable_think,
                                        format_penalty=format_penalty,
                                        use_turn_scores=use_turn_scores, history_starts=starts,
                                        image_prompts=image_prompts))
    n_rows = max(len(samples), 1)
    n_rows = -(-n_rows // row_multiple) * row_multiple
    length = bucket_length(max((len(s.tokens) for s in samples), default=1), **ROW_BUCKETS)
    out = {
        "tokens": np.full((n_rows, length), pad_id, np.int32),
        "attention_mask": np.zeros((n_rows, length), bool),
        "loss_mask": np.zeros((n_rows, length), np.float32),
        "sample_logprobs": np.zeros((n_rows, length), np.float32),
        "raw_logprobs": np.zeros((n_rows, length), np.float32),
        "token_rewards": np.zeros((n_rows, length), np.float32),
        "turn_ids": np.full((n_rows, length), -1, np.int32),
        "group_ids": np.full((n_rows,), -1, np.int32),
        "episode_ids": np.full((n_rows,), -1, np.int32),
        "scores": np.zeros((n_rows,), np.float32),
        "same_context": np.zeros((n_rows, length), bool),
        "token_versions": np.zeros((n_rows, length), np.int32),
    }
    for row, s in enumerate(samples):
        ep = episodes[s.episode]
        n = len(s.tokens)
        out["tokens"][row, :n] = s.tokens
        out["attention_mask"][row, :n] = True
        out["group_ids"][row] = ep.group_id
        out["episode_ids"][row] = s.episode
        out["scores"][row] = scores[s.episode]
        for k, turn in enumerate(s.turn_indices):
            pos = np.nonzero(s.turn_map == k)[0]
            if len(pos) == 0:
                continue
            out["turn_ids"][row, pos] = turn
            sample_lp, raw_lp = logprobs[(s.episode, turn)]
            out["sample_logprobs"][row, pos] = sample_lp[: len(pos)]
            out["raw_logprobs"][row, pos] = raw_lp[: len(pos)]
            out["same_context"][row, pos] = sampled_in_row_context(s.tokens, pos[0], ep.history[turn], s.start)
            if versions and (s.episode, turn) in versions:
                out["token_versions"][row, pos] = versions[(s.episode, turn)][: len(pos)]
            if turn in s.trained and ok[s.episode]:
                out["loss_mask"][row, pos] = 1.0
                if s.reward_turn is None:
                    record = ep.history[turn]
                    out["token_rewards"][row, pos[-1]] += turn_score(record, format_penalty)
        if s.reward_turn is not None:
            trained_pos = np.nonzero(out["loss_mask"][row] > 0)[0]
            if len(trained_pos):
                out["token_rewards"][row, trained_pos[-1]] += scores[s.episode]
    if image_prompts is not None:
        empty = empty_row_images(image_prompts.features)
        out["images"] = [s.images for s in samples] + [empty] * (n_rows - len(samples))
    return TrajectoryBatch(**out)
