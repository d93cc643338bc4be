"""What a rollout is configured with, and the stop sequences that end a response."""

from __future__ import annotations

import dataclasses
from typing import Any

from ragen_jax.config import RunConfig
from ragen_jax.config.fields import field_problems
from ragen_jax.config.sections import RolloutSection, TurnLimits
from ragen_jax.sampling import SamplingConfig


@dataclasses.dataclass(frozen=True)
class RolloutConfig(RolloutSection, TurnLimits):
    """What an engine plays with: the config's rollout section and the env's turn limits (`of` builds it from a
    RunConfig; every default is the config's). Refuses settings that cannot play (the config check's words)."""

    def __post_init__(self):
        limits = TurnLimits(**{f.name: getattr(self, f.name) for f in dataclasses.fields(TurnLimits)})
        settings = RolloutSection(**{f.name: getattr(self, f.name) for f in dataclasses.fields(RolloutSection)})
        problems = field_problems(limits, "env") + field_problems(settings, "rollout") + [
            f"config.{p}" for p in self.problems()]
        if problems:
            raise ValueError("; ".join(problems))

    @classmethod
    def of(cls, run: Any) -> "RolloutConfig":
        """The rollout of a RunConfig (or of an ml_collections config, checked first): its rollout section and
        env.max_turn / max_actions_*."""
        if not isinstance(run, RunConfig):
            run = RunConfig.from_config(run)
        return cls(**vars(run.rollout), **vars(run.env.turn_limits))

    def stop_sequences(self, tokenizer) -> tuple[tuple[int, ...], ...]:
        """The token sequences that end a response besides the end-of-turn ids: "</answer>", or "</tool_call>" in
        the tool-call format (one call a turn), with stop_at_answer (an engine computes them once)."""
        end = "</tool_call>" if self.action_format == "tool_call" else "</answer>"
        return stop_sequences_for(tokenizer, end) if self.stop_at_answer else ()

    def stop_gates(self, tokenizer) -> tuple[tuple[int, ...], ...]:
        """With thinking, "</answer>" ends a response only after "</think>": RAGEN's parse reads the answer after
        the reasoning, so an "</answer>" the reasoning quotes must not end the turn (an engine computes them once)."""
        return stop_sequences_for(tokenizer, "</think>") if self.stop_at_answer and self.enable_think else ()

    def sampling(self, tokenizer, stop_sequences: tuple[tuple[int, ...], ...], *, temperature: float | None = None,
                 greedy: bool = False, top_p: float | None = None, top_k: int | None = None,
                 stop_after: tuple[tuple[int, ...], ...] = ()) -> SamplingConfig:
        """The sampler's settings for a turn; temperature, top_p and top_k given here replace this config's (a
        validation samples with its own, as veRL's val_kwargs). Temperature 0 samples greedily (vLLM's and
        transformers' reading), reporting log-probs of the unscaled distribution."""
        temperature = self.temperature if temperature is None else temperature
        return SamplingConfig(
            max_new_tokens=self.response_length, temperature=temperature if temperature > 0 else 1.0,
            top_p=self.top_p if top_p is None else top_p, top_k=self.top_k if top_k is None else top_k,
            greedy=greedy or temperature == 0,
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
