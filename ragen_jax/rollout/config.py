"""What a rollout is configured with, and the stop sequences that end a response."""

from __future__ import annotations

import dataclasses

from ragen_jax.rollout.batching import turn_scores_problem
from ragen_jax.rollout.parsing import ACTION_SEP
from ragen_jax.sampling import SamplingConfig


@dataclasses.dataclass(frozen=True)
class RolloutConfig:
    """Rollout settings (RAGEN names in brackets)."""

    max_turn: int = 5
    max_actions_per_turn: int = 2  # [agent_proxy.max_actions_per_turn]
    max_actions_per_traj: int = 10  # [custom_envs.*.max_actions_per_traj]
    response_length: int = 400  # tokens per turn [actor_rollout_ref.rollout.response_length]
    max_model_len: int = 3600  # context + response, tokens [rollout.max_model_len]
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    enable_think: bool = True
    stop_at_answer: bool = True  # stop a turn at "</answer>" (the original has no stop strings)
    action_sep: str = ACTION_SEP  # between an answer's actions [agent_proxy.action_sep]
    context_mode: str = "full"  # full | limited_multi_turn | single_turn
    context_window: int = 1  # turns kept by limited_multi_turn / single_turn, -1 = all [max_context_window]
    prompt_style: str = "ragen"  # ragen | compact (state only; a departure for small models)
    prompt_max_tokens: int = 0  # prompts' "Max response length"; 0: the env's (RAGEN's max_tokens) or response_length
    use_turn_scores: bool = False
    format_penalty: float = -0.1
    reward_norm_method: str = "identity"  # identity | mean_std | mean | asym_clip
    reward_norm_grouping: str = "state"  # state | inductive | batch

    def __post_init__(self):
        problem = turn_scores_problem(self.context_mode, self.use_turn_scores)
        if problem:
            raise ValueError(problem)
        if not (self.context_window >= 1 or self.context_window == -1):
            raise ValueError(f"RolloutConfig.context_window={self.context_window} shows no turn at all (a prompt "
                             "without the current state): use the number of turns to show (>= 1, the current one "
                             "included) or -1 for every turn.")

    def stop_sequences(self, tokenizer) -> tuple[tuple[int, ...], ...]:
        """The token sequences that end a response besides the end-of-turn ids (an engine computes them once)."""
        return stop_sequences_for(tokenizer, "</answer>") if self.stop_at_answer else ()

    def stop_gates(self, tokenizer) -> tuple[tuple[int, ...], ...]:
        """With thinking, "</answer>" ends a response only after "</think>": RAGEN's parse reads the answer after
        the reasoning, so an "</answer>" the reasoning quotes must not end the turn (an engine computes them once)."""
        return stop_sequences_for(tokenizer, "</think>") if self.stop_at_answer and self.enable_think else ()

    def sampling(self, tokenizer, stop_sequences: tuple[tuple[int, ...], ...], *, temperature: float | None = None,
                 greedy: bool = False, top_p: float | None = None, top_k: int | None = None,
                 stop_after: tuple[tuple[int, ...], ...] = ()) -> SamplingConfig:
        """The sampler's settings for a turn; temperature, top_p and top_k given here replace this config's (a
        validation samples with its own, as veRL's val_kwargs)."""
        return SamplingConfig(
            max_new_tokens=self.response_length,
            temperature=self.temperature if temperature is None else temperature,
            top_p=self.top_p if top_p is None else top_p, top_k=self.top_k if top_k is None else top_k, greedy=greedy,
            eos_ids=tuple(tokenizer.eos_token_ids), stop_sequences=stop_sequences, stop_after=stop_after)


STOP_CONTEXTS = (("", ""), (" ", ""), ("\n", ""), ("", "\n"), (" ", "\n"), ("\n", "\n"))


def stop_sequences_for(tokenizer, text: str) -> tuple[tuple[int, ...], ...]:
    """The token sequences that end a response with `text`: its own tokens first, then its tokens after a space or
    a newline and before a newline, each the shortest run of tokens whose text holds `text`. A byte-level BPE
    merges a space into the punctuation after it (Qwen's " </" is one token, not " " + "</"), so `<answer> Up
    </answer>` never ends in the tokens of "</answer>" alone; vLLM's stop strings match the decoded text instead."""
    found: dict[tuple[int, ...], None] = {}
    for before, after in STOP_CONTEXTS:
        ids = list(tokenizer.encode(before + text + after))
        start = max((i for i in range(len(ids)) if text in tokenizer.decode(ids[i:])), default=None)
        if start is None:  # the context changed how `text` itself decodes; nothing to match on
            continue
        end = next(j for j in range(start + 1, len(ids) + 1) if text in tokenizer.decode(ids[start:j]))
        found[tuple(ids[start:end])] = None
    return tuple(found)
