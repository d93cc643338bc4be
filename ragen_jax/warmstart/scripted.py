"""Demonstrations from a host env's scripted policy (`HostEnv.scripted_action`), for warm starts on host and tool envs.

Each turn every active env names its next action (an answer text, or a ToolCall for a ToolEnv in the tool-call
format); the response is that action in the rollout's own format ("</think>{reasoning}<answer>...</answer>" or
"</think>{reasoning}<tool_call>{...}</tool_call>"), recorded and booked exactly as the engine records a sampled
turn, so `demo_rows` makes the RL batch's rows and masks from them. An env that has no action (None) ends its
episode there, unsolved.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from envs.host_batch import HostEnvBatch
from envs.protocols import HostEnv
from ragen_jax.rollout.config import RolloutConfig
from ragen_jax.rollout.context import ContextBuilder
from ragen_jax.rollout.episodes import book_turn, fit_context, open_episodes, strip_end_of_turn
from ragen_jax.rollout.parsing import parse_response, parse_tool_response
from ragen_jax.rollout.types import Episode
from ragen_jax.tool_calls import ToolCall, format_tool_call


def has_scripted_policy(env_class: type) -> bool:
    """Whether a host env class overrides `HostEnv.scripted_action` (it can play warm-start demonstrations)."""
    return isinstance(env_class, type) and issubclass(env_class, HostEnv) and (
        getattr(env_class, "scripted_action", None) is not HostEnv.scripted_action)


def scripted_response_text(action: str | ToolCall, cfg: RolloutConfig, reasoning: str = "") -> str:
    """A scripted action as a response after the generation prefix ("<think>", or "<answer>" / nothing without
    thinking): the answer or the tool call, after the closed reasoning."""
    if cfg.action_format == "tool_call":
        if not isinstance(action, ToolCall):
            raise TypeError(f"rollout.action_format='tool_call' needs scripted_action() to return a ToolCall, got "
                            f"{type(action).__name__}.")
        body = format_tool_call(action)
        return f"{reasoning}</think>{body}" if cfg.enable_think else body
    if not isinstance(action, str):
        raise TypeError(f"The answer format needs scripted_action() to return the answer text, got "
                        f"{type(action).__name__} (a ToolCall needs rollout.action_format='tool_call').")
    if cfg.enable_think:
        return f"{reasoning}</think><answer>{action}</answer>"
    return f"{action}</answer>"


def play_scripted_episodes(env_batch: HostEnvBatch, seeds: Sequence[int], tokenizer, cfg: RolloutConfig, *,
                           reasoning_text: str = "", tag: str = "demo") -> list[Episode]:
    """Play one episode per seed with each env's `scripted_action()`, recording turns as the rollout engine does.
    A scripted response the rollout's parser would not read back into the same action is refused (ValueError)."""
    if not isinstance(env_batch, HostEnvBatch):
        raise TypeError("Scripted demos play a host env batch (envs.host_batch.HostEnvBatch).")
    B = env_batch.batch_size
    if len(seeds) != B:
        raise ValueError(f"Env batch holds {B} episodes but got {len(seeds)} seeds.")
    builder = ContextBuilder(tokenizer, enable_think=cfg.enable_think, action_format=cfg.action_format)
    observations = env_batch.reset([int(s) for s in seeds])
    episodes = open_episodes(env_batch, cfg, tag, seeds, range(B), observations)
    active = np.array([not error for error in env_batch.reset_errors], bool)
    for b in np.nonzero(~active)[0]:
        episodes[b].error, episodes[b].truncated = env_batch.reset_errors[b], True
    for _ in range(cfg.max_turn):
        if not active.any():
            break
        actions: list[list] = [[] for _ in range(B)]
        for b in np.nonzero(active)[0]:
            ep, record = episodes[b], episodes[b].history[-1]
            try:
                action = env_batch.envs[b].scripted_action()
            except Exception as e:  # noqa: BLE001 - a script failing on one state ends only that episode
                ep.error, action = f"{type(e).__name__}: {e} (in scripted_action)", None
            if action is None or ep.num_actions >= cfg.max_actions_per_traj:
                active[b] = False
                if ep.num_turns:
                    ep.history.pop()
                ep.truncated = True
                continue
            fit_context(builder, cfg, ep)
            text = scripted_response_text(action, cfg, reasoning_text)
            record.response_tokens = list(tokenizer.encode(text))
            if not cfg.stop_at_answer:
                record.response_tokens.append(builder.end_of_turn_id)
            full = builder.generation_suffix + tokenizer.decode(record.response_tokens)
            record.response_text = record.recorded_text = strip_end_of_turn(full, builder.eos_texts)
            if ep.tools:
                parsed = parse_tool_response(record.response_text, tools=ep.tools, max_calls=1,
                                             enable_think=cfg.enable_think)
            else:
                parsed = parse_response(full, action_lookup=None, max_actions=1, enable_think=cfg.enable_think)
            if list(parsed.actions) != [action]:
                raise ValueError(f"The scripted response {full!r} parses to {list(parsed.actions)}, not the script's "
                                 f"{action!r} ({parsed.problem or 'the tokenizer does not round-trip it'}).")
            if len(record.response_tokens) > cfg.response_length:
                raise ValueError(f"The scripted response {full!r} is {len(record.response_tokens)} tokens, more than "
                                 f"rollout.response_length={cfg.response_length}: raise it or shorten the script's "
                                 "actions.")
            ep.valid_turns += 1
            actions[b] = [action]
        result = env_batch.step(actions, active)
        for b in np.nonzero(active)[0]:
            if book_turn(episodes[b], result, b, actions[b], cfg):
                active[b] = False
    return episodes
